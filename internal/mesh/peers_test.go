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
