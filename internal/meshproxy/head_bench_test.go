package meshproxy

import (
	"net/http"
	"testing"
)

// BenchmarkAppendResponseHead measures the serving node's head of a small
// answer that is not a stream (appendResponseHeadFrame), into a reused
// buffer.
func BenchmarkAppendResponseHead(b *testing.B) {
	hdr := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"123"}, "Date": {"now"}}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = appendResponseHeadFrame(buf[:0], http.StatusOK, hdr)
	}
}

// BenchmarkIsStreamType measures the Content-Types each answer is checked
// for (isStreamType, on both nodes): the common ones, as instances write
// them.
func BenchmarkIsStreamType(b *testing.B) {
	types := []string{"application/json", "text/event-stream", "application/json; charset=utf-8", "application/x-ndjson"}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for _, t := range types {
			if isStreamType(t) {
				n++
			}
		}
	}
	if n == 0 {
		b.Fatal("no stream type found")
	}
}
