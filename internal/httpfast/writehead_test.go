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

// TestWriteHeadDateAndType: a Date and a Content-Type of the handler's
// are sent as they are, once; without them the writer adds a Date and a
// sniffed type (in the handler's header too), except under nosniff.
func TestWriteHeadDateAndType(t *testing.T) {
	const date = "Tue, 01 Dec 2026 20:00:00 GMT"
	tests := []struct {
		name          string
		give          http.Header
		date, ctype   string
		typeInHandler bool
	}{
		{"theirs", http.Header{"Date": {date}, "Content-Type": {"text/x-mine"}}, date, "text/x-mine", true},
		{"ours", http.Header{}, "", "text/plain; charset=utf-8", true},
		{"nosniff", http.Header{"X-Content-Type-Options": {"nosniff"}}, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			fc := &fastConn{fs: &Server{}, bw: bufio.NewWriterSize(&out, fastWriteBytes)}
			fc.w = fastWriter{fc: fc, req: &http.Request{Method: http.MethodGet}, body: &fastBody{}, header: tt.give, contentLength: -1}
			tt.give.Set("Content-Length", "2")
			_, _ = fc.w.Write([]byte("ok"))
			if !fc.w.finish() || fc.bw.Flush() != nil {
				t.Fatal(fc.w.err)
			}
			res, err := http.ReadResponse(bufio.NewReader(&out), nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := res.Header["Date"]; len(d) != 1 || tt.date != "" && d[0] != tt.date {
				t.Errorf("Date %q, want one %q", d, tt.date)
			}
			if ct := res.Header["Content-Type"]; tt.ctype == "" && len(ct) != 0 || tt.ctype != "" && (len(ct) != 1 || ct[0] != tt.ctype) {
				t.Errorf("Content-Type %q, want %q", ct, tt.ctype)
			}
			if _, ok := tt.give["Content-Type"]; ok != tt.typeInHandler {
				t.Errorf("handler's header has a Content-Type: %t", ok)
			}
		})
	}
}
