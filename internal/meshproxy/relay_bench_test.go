package meshproxy

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"

	"github.com/nodeld/nodeld/internal/mesh"
)

// discardWriter is a ResponseWriter that keeps its header map (cleared by
// the caller between responses) and drops what is written.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// smallAnswer is the frames of a small JSON answer that is not a stream:
// a head with Content-Type and Content-Length, one body frame, the end.
func smallAnswer(body []byte) []byte {
	hdr := http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(body))}}
	in, _ := appendResponseHeadFrame(nil, 200, hdr)
	in = appendBodyFrames(in, frameRespBody, body)
	return mesh.AppendFrameHeader(in, frameRespEnd, 0)
}

// BenchmarkRelayResponseSmall measures the consumer's relay of a small
// answer that is not a stream (relayResponse): a head with Content-Type
// and Content-Length, one body frame and the end frame, into a reused
// ResponseWriter, from a small frame buffer of the forwarder's pools.
func BenchmarkRelayResponseSmall(b *testing.B) {
	body := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`)
	in := smallAnswer(body)
	fb := newFramePools().bufFor(false, len(body))
	defer fb.release()
	w := &discardWriter{h: http.Header{}}
	r := bytes.NewReader(in)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r.Reset(in)
		clear(w.h)
		w.n = 0
		if err := relayResponse(r, w, &fb); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if w.status != 200 || w.n != len(body) || w.h.Get("Content-Length") != strconv.Itoa(len(body)) || w.h.Get("Content-Type") != "application/json" {
		b.Fatalf("relayed %d, %d bytes, %v", w.status, w.n, w.h)
	}
}
