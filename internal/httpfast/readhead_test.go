package httpfast

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// TestReadHead checks what the fast reader serves and what it leaves to
// net/http (a nil request).
func TestReadHead(t *testing.T) {
	tests := []struct {
		name, head string
		fast       bool
	}{
		{"post", "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}", true},
		{"get", "GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n", true},
		{"chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"expect", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", false},
		{"http/1.0", "GET / HTTP/1.0\r\nHost: a\r\n\r\n", false},
		{"head method", "HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", false},
		{"delete", "DELETE /api/delete HTTP/1.1\r\nHost: a\r\n\r\n", false},
		{"no host", "GET / HTTP/1.1\r\n\r\n", false},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", false},
		{"two lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", false},
		{"signed length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", false},
		{"folded", "GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n", false},
		{"space in name", "GET / HTTP/1.1\r\nHost: a\r\nX : b\r\n\r\n", false},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", false},
		{"absolute form", "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", false},
		{"control in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", false},
		{"upgrade", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", false},
		{"bad host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", false},
		{"host with port", "GET / HTTP/1.1\r\nHost: [::1]:8090\r\n\r\n", true},
		{"too big", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", fastHeadBytes) + "\r\n\r\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _, err := readHeadOf([]byte(tt.head))
			if err != nil {
				t.Fatalf("readHead: %v", err)
			}
			if got := r != nil; got != tt.fast {
				t.Fatalf("served by the fast reader: %t, want %t", got, tt.fast)
			}
		})
	}
}

// readHeadOf runs the fast reader's head parser over b.
func readHeadOf(b []byte) (*http.Request, int, error) {
	fc := &fastConn{remote: "127.0.0.1:1"}
	fc.br = bufio.NewReaderSize(bytes.NewReader(b), fastHeadBytes)
	return fc.readHead()
}

// FuzzReadHead checks the fast reader against net/http's: a head it
// serves must parse in net/http to the same method, target, Host, length
// and headers.
func FuzzReadHead(f *testing.F) {
	for _, s := range []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8090\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nx-custom: a, b\r\n\r\n",
		"GET /a%20b?c=d HTTP/1.1\r\nHost: [::1]\r\nOrigin: http://localhost\r\nAuthorization: Bearer x\r\n\r\n",
		"POST /v1/embeddings HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := readHeadOf(b)
		if err != nil || r == nil {
			return
		}
		want, werr := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
		if werr != nil {
			t.Fatalf("fast reader served %q, net/http refuses it: %v", b[:n], werr)
		}
		if r.Method != want.Method || r.RequestURI != want.RequestURI || r.Host != want.Host ||
			r.ContentLength != want.ContentLength || r.Close != want.Close {
			t.Fatalf("%q: fast %s %s host %q len %d close %t; net/http %s %s host %q len %d close %t", b[:n],
				r.Method, r.RequestURI, r.Host, r.ContentLength, r.Close,
				want.Method, want.RequestURI, want.Host, want.ContentLength, want.Close)
		}
		if r.URL.Path != want.URL.Path || r.URL.RawQuery != want.URL.RawQuery {
			t.Fatalf("%q: URL %+v, net/http %+v", b[:n], r.URL, want.URL)
		}
		for k, vs := range want.Header {
			if strings.Join(r.Header[k], "\x00") != strings.Join(vs, "\x00") {
				t.Fatalf("%q: header %s = %q, net/http %q", b[:n], k, r.Header[k], vs)
			}
		}
		if len(r.Header) != len(want.Header) {
			t.Fatalf("%q: headers %v, net/http %v", b[:n], r.Header, want.Header)
		}
	})
}

// TestReadHeadReusesTheHeaderMap: a connection's second request reuses
// the first's header map and value slices: its head costs the head's
// text and one allocation for the request with its context, nothing per
// header (a name not known but canonical is the head's text too).
func TestReadHeadReusesTheHeaderMap(t *testing.T) {
	head := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n" +
		"Accept: */*\r\nUser-Agent: x\r\nX-Trace: t\r\nContent-Length: 2\r\n\r\n")
	src := bytes.NewReader(head)
	fc := &fastConn{remote: "127.0.0.1:1"}
	fc.br = bufio.NewReaderSize(src, fastHeadBytes)
	read := func() *http.Request {
		src.Reset(head)
		fc.br.Reset(src)
		r, _, err := fc.readHead()
		if err != nil || r == nil {
			t.Fatalf("readHead: %v, %v", r, err)
		}
		return r
	}
	first := read()
	if got := first.Header.Get("Accept"); got != "*/*" {
		t.Fatalf("Accept %q", got)
	}
	if n := testing.AllocsPerRun(50, func() { read() }); n > 2 {
		t.Errorf("a reused connection's head costs %v allocations, want at most 2", n)
	}
	if r := read(); len(r.Header) != 5 || r.Header.Get("User-Agent") != "x" || r.Header.Get("X-Trace") != "t" {
		t.Errorf("reused header %v", r.Header)
	}
}
