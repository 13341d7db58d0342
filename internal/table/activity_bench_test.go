package table

import "testing"

// BenchmarkResolveHeldDone is the table's part of every local request: a
// held resolution and its Done, which records the registration's
// activity.
//
//	go test -run '^$' -bench BenchmarkResolveHeldDone ./internal/table/
func BenchmarkResolveHeldDone(b *testing.B) {
	tb := New(self, Options{})
	if _, err := tb.RegisterLocal(OriginPlaced, "chat", "http://127.0.0.1:1", "m", "openai", "llama.cpp"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			_, h, _ := tb.ResolveHeld("chat")
			h.Done()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, h, _ := tb.ResolveHeld("chat")
				h.Done()
			}
		})
	})
}
