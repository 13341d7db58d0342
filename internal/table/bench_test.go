package table

import "testing"

// staticAdmission admits a fixed set of nodes without a lock, so the
// benchmarks measure the table and not the fake.
type staticAdmission map[string]bool

func (a staticAdmission) IsAdmitted(node string) bool { return a[node] }

// benchTable is a table as the proxy sees it on a busy node: a locally
// served role and a role served by the best of three admitted peers.
func benchTable(b testing.TB) *Table {
	b.Helper()
	peers := []string{"n-a", "n-b", "n-c"}
	adm := staticAdmission{}
	for _, p := range peers {
		adm[p] = true
	}
	tbl := New(self, Options{Admission: adm})
	if _, err := tbl.RegisterLocal(OriginPlaced, "local", "http://127.0.0.1:8080", "m", "openai", "llama.cpp"); err != nil {
		b.Fatal(err)
	}
	for i, p := range peers {
		tbl.AllowRemoteNode("remote", p, true)
		if !tbl.IngestAdvertisement(p, ad("remote", p, MetaLoad, []string{"0.5", "0.25", "0.75"}[i], MetaHealth, HealthUp)) {
			b.Fatalf("advertisement of %s refused", p)
		}
	}
	return tbl
}

// BenchmarkResolve measures the request path's lookup: Resolve of a local
// and of a remote role, ResolveHeld with its Hold, and Resolve from many
// goroutines at once.
func BenchmarkResolve(b *testing.B) {
	tbl := benchTable(b)
	b.Run("local", func(b *testing.B) {
		for b.Loop() {
			if _, ok := tbl.Resolve("local"); !ok {
				b.Fatal("local role did not resolve")
			}
		}
	})
	b.Run("remote", func(b *testing.B) {
		for b.Loop() {
			if tg, ok := tbl.Resolve("remote"); !ok || tg.NodeID != "n-b" {
				b.Fatalf("remote role resolved to %+v, %v", tg, ok)
			}
		}
	})
	b.Run("held", func(b *testing.B) {
		for b.Loop() {
			_, h, ok := tbl.ResolveHeld("local")
			if !ok {
				b.Fatal("local role did not resolve")
			}
			h.Done()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, ok := tbl.Resolve("remote"); !ok {
					b.Fatal("remote role did not resolve")
				}
			}
		})
	})
}

// TestResolveRemoteAllocatesNothing: resolving a role served by a few
// peers ranks them on the resolver's stack.
func TestResolveRemoteAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	tbl := benchTable(t)
	n := testing.AllocsPerRun(100, func() {
		if tg, ok := tbl.Resolve("remote"); !ok || tg.NodeID != "n-b" {
			t.Fatalf("remote role resolved to %+v, %v", tg, ok)
		}
	})
	if n != 0 {
		t.Errorf("Resolve of a remote role allocates %v times", n)
	}
}
