package httpfast

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// TestWriteHeadWhole: a head is written whole and in order however large
// (one larger than the write buffer included), with line breaks in a
// value replaced, as net/http writes it.
func TestWriteHeadWhole(t *testing.T) {
	for _, size := range []int{10, fastWriteBytes - 100, 3 * fastWriteBytes} {
		var out bytes.Buffer
		fc := &fastConn{fs: &Server{}, bw: bufio.NewWriterSize(&out, fastWriteBytes)}
		h := http.Header{}
		fc.w = fastWriter{fc: fc, req: &http.Request{Method: http.MethodGet}, body: &fastBody{}, header: h, contentLength: -1}
		big := string(bytes.Repeat([]byte("a"), size))
		h.Set("X-Big", big)
		h.Set("X-Split", "a\r\nb")
		h.Set("Content-Length", "2")
		_, _ = fc.w.Write([]byte("ok"))
		if !fc.w.finish() || fc.bw.Flush() != nil {
			t.Fatalf("size %d: %v", size, fc.w.err)
		}
		res, err := http.ReadResponse(bufio.NewReader(&out), nil)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		got, err := io.ReadAll(res.Body)
		if err != nil || string(got) != "ok" || res.Header.Get("X-Big") != big || res.Header.Get("X-Split") != "a  b" ||
			res.Header.Get("Date") == "" || res.Header.Get("Content-Type") == "" {
			t.Fatalf("size %d: %v %q, %v", size, res.Header, got, err)
		}
	}
}
