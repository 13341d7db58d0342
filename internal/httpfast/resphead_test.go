package httpfast

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// checkResponseHead parses data with parseResponseHead and, when it
// takes the head, checks that http.ReadResponse reads the same response
// from the same bytes; when it does not, that it consumed nothing.
func checkResponseHead(t *testing.T, data []byte, method string) *http.Response {
	t.Helper()
	req := &http.Request{Method: method}
	br := bufio.NewReaderSize(bytes.NewReader(data), 64<<10)
	_, _ = br.Peek(len(data))
	held := br.Buffered()
	res := parseResponseHead(br, req, nil)
	if res == nil {
		if br.Buffered() != held {
			t.Fatalf("declined head consumed %d bytes", held-br.Buffered())
		}
		return nil
	}
	want, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), req)
	if err != nil {
		t.Fatalf("parsed a head net/http refuses (%v): %q", err, data)
	}
	if res.Status != want.Status || res.StatusCode != want.StatusCode || res.Proto != want.Proto ||
		res.ProtoMajor != want.ProtoMajor || res.ProtoMinor != want.ProtoMinor ||
		res.ContentLength != want.ContentLength || res.Close != want.Close {
		t.Fatalf("head differs from net/http's:\n got %q %d %s %d close=%v\nwant %q %d %s %d close=%v",
			res.Status, res.StatusCode, res.Proto, res.ContentLength, res.Close,
			want.Status, want.StatusCode, want.Proto, want.ContentLength, want.Close)
	}
	if !reflect.DeepEqual(res.Header, want.Header) {
		t.Fatalf("header differs from net/http's:\n got %q\nwant %q", res.Header, want.Header)
	}
	// A connection's slot, its value slices reused (headerDone): the
	// same header, the second time as the first.
	slot := &responseSlot{headerDone: true}
	for range 2 {
		br := bufio.NewReaderSize(bytes.NewReader(data), 64<<10)
		_, _ = br.Peek(len(data))
		if again := parseResponseHead(br, req, slot); again == nil || !reflect.DeepEqual(again.Header, want.Header) {
			t.Fatalf("header in a reused slot differs from net/http's: %v", again)
		}
	}
	if len(res.Trailer) != 0 || len(want.Trailer) != 0 || res.TransferEncoding != nil || want.TransferEncoding != nil {
		t.Fatalf("trailers or transfer codings on a head with a length: %q", data)
	}
	got, gerr := io.ReadAll(res.Body)
	exp, werr := io.ReadAll(want.Body)
	if !bytes.Equal(got, exp) || !errors.Is(gerr, werr) && (gerr == nil || werr == nil || gerr.Error() != werr.Error()) {
		t.Fatalf("body differs from net/http's: %q %v, want %q %v", got, gerr, exp, werr)
	}
	return res
}

func TestParseResponseHead(t *testing.T) {
	common := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-length: 5\r\nX-Custom:  a b \t\r\n" +
		"Date: Tue, 01 Dec 2026 20:00:00 GMT\r\nX-Custom: c\r\n\r\nhello"
	res := checkResponseHead(t, []byte(common), http.MethodPost)
	if res == nil {
		t.Fatal("the common head was not parsed")
	}
	if res.Header.Get("Content-Length") != "5" || len(res.Header["X-Custom"]) != 2 || res.Header["X-Custom"][0] != "a b" {
		t.Fatalf("header %q", res.Header)
	}
	for _, head := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, Close\r\n\r\nok",
		"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200\r\nContent-Length: 3\r\n\r\nab", // short body
		"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nfail",
	} {
		if checkResponseHead(t, []byte(head), http.MethodGet) == nil {
			t.Errorf("not parsed: %q", head)
		}
	}
	// Left to net/http: what it frames or rewrites differently.
	for _, head := range []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", // not whole yet
		"HTTP/1.1 200 OK\r\nBad Name: 1\r\nContent-Length: 0\r\n\r\n",
	} {
		if checkResponseHead(t, []byte(head), http.MethodGet) != nil {
			t.Errorf("parsed, not left to net/http: %q", head)
		}
	}
	if checkResponseHead(t, []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), http.MethodHead) != nil {
		t.Error("a HEAD answer was parsed")
	}
}

// FuzzResponseHead checks that every head parseResponseHead takes is read
// the same by http.ReadResponse, and that it consumes nothing of the
// heads it leaves to it.
func FuzzResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nshort",
		"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nKeep-Alive: timeout=5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nx-request-id: \t abc \r\nVARY: Origin\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, m uint8) {
		method := []string{http.MethodGet, http.MethodPost, http.MethodHead}[int(m)%3]
		if len(data) > 60<<10 {
			return
		}
		checkResponseHead(t, data, method)
	})
}
