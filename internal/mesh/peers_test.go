package mesh

import "testing"

// BenchmarkLinkedPeer is the mesh's part of a request forwarded over
// TLS/TCP: the consumer looks its peer up by node id for every request
// (LinkedPeer), the server by the key a connection presents
// (LinkedPeerByKey), and the table asks whether the peer is admitted.
func BenchmarkLinkedPeer(b *testing.B) {
	a, c := pair(b)
	id, key := c.id(), c.ident.PublicKey()
	b.Run("id", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := a.m.LinkedPeer(id); !ok {
				b.Fatal("the linked peer not found")
			}
		}
	})
	b.Run("key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := a.m.LinkedPeerByKey(key); !ok {
				b.Fatal("the linked peer not found")
			}
		}
	})
	b.Run("admitted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !a.m.IsAdmitted(id) {
				b.Fatal("the linked peer not admitted")
			}
		}
	})
}

// TestLinkedPeerAllocatesNothing: the lookups of every request hand out
// the peer's pinned key itself, not a copy of it.
func TestLinkedPeerAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, c := pair(t)
	id, key := c.id(), c.ident.PublicKey()
	n := testing.AllocsPerRun(100, func() {
		p, ok := a.m.LinkedPeer(id)
		if !ok || !p.Key.Equal(key) {
			t.Fatalf("LinkedPeer(%s) = %+v, %v", id, p, ok)
		}
		if p, ok = a.m.LinkedPeerByKey(key); !ok || p.ID != id {
			t.Fatalf("LinkedPeerByKey = %+v, %v", p, ok)
		}
	})
	if n != 0 {
		t.Errorf("LinkedPeer and LinkedPeerByKey allocate %v times", n)
	}
}
