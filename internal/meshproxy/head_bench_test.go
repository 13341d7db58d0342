package meshproxy

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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

// BenchmarkAppendRequestHead measures the consumer's head of a chat
// request (appendRequestHeadFrame), into a reused buffer.
func BenchmarkAppendRequestHead(b *testing.B) {
	h := meshRequestHead{V: MeshWireVersion, Role: "chat", Method: "POST", Path: "/v1/chat/completions",
		ContentType: "application/json", BodyBytes: 93}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRequestHeadFrame(buf[:0], h)
	}
}

// BenchmarkDecodeHeads measures the decoding of a chat request's head on
// the serving node and of its answer's head on the consumer, each of the
// form the other side writes.
func BenchmarkDecodeHeads(b *testing.B) {
	req := []byte(`{"v":1,"role":"chat","method":"POST","path":"/v1/chat/completions","content_type":"application/json","body_bytes":93}`)
	resp := []byte(`{"v":1,"status":200,"headers":{"Content-Type":"application/json","Content-Length":"123"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeRequestHead(req, "chat"); err != nil {
			b.Fatal(err)
		}
		if _, err := decodeResponseHead(resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMeshMetricsCount measures the counts of a forward and of a
// served exchange that went well.
func BenchmarkMeshMetricsCount(b *testing.B) {
	m, err := newMeshMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.forwarded(fwdOK)
		m.serve("chat", servedOK)
	}
}
