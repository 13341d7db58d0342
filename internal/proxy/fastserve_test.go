package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// conn is one raw client connection to a role port.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRole(t *testing.T, h *harness, role string) *rawConn {
	t.Helper()
	addr, _ := h.p.Addr(role)
	c, err := net.DialTimeout("tcp", addr.String(), testDeadline)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(testDeadline))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *rawConn) read() (*http.Response, string) {
	rc.t.Helper()
	res, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		rc.t.Fatalf("read response: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		rc.t.Fatalf("read body: %v", err)
	}
	return res, string(b)
}

func post(path, body string, extra ...string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
		strings.Join(extra, "") + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
}

// TestFastConnHandsOff checks that one connection can go from the fast
// reader to net/http in the middle: the requests the fast reader leaves to
// net/http (a chunked body, a head over its buffer, HTTP/1.0) are served
// with the bytes already read, and pipelined requests keep their order.
func TestFastConnHandsOff(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served"})
	h := startProxy(t, Config{}, Deps{})
	h.resolver.set("chat", table.Target{Kind: table.TargetLocal, Base: up.URL, Model: "served"})
	rc := dialRole(t, h, "chat")
	chat := `{"model":"x","messages":[{"role":"user","content":"hi"}]}`
	chunked := "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(chat), chat)
	// Two fast requests and a chunked one, written at once.
	rc.send(post("/v1/chat/completions", chat) + "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n" + chunked)
	for i, want := range []string{"hello from served", `"id":"served"`, "hello from served"} {
		res, body := rc.read()
		if res.StatusCode != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("response %d: %d %q, want 200 with %q", i, res.StatusCode, body, want)
		}
		if res.Header.Get(RouteHeader) != "local" {
			t.Errorf("response %d: %s = %q", i, RouteHeader, res.Header.Get(RouteHeader))
		}
	}
	// net/http serves the rest of the connection, a big head included.
	rc.send(post("/v1/chat/completions", chat, "X-Pad: "+strings.Repeat("a", 8<<10)+"\r\n"))
	if res, body := rc.read(); res.StatusCode != http.StatusOK || !strings.Contains(body, "hello from served") {
		t.Fatalf("big head: %d %q", res.StatusCode, body)
	}
	for _, r := range up.Requests() {
		if r.Method == http.MethodPost && string(r.Body) != strings.Replace(chat, `"x"`, `"served"`, 1) {
			t.Errorf("upstream got %q, want the body pinned", r.Body)
		}
	}
	if got := up.Count(); got != 4 {
		t.Errorf("upstream saw %d requests, want 4", got)
	}

	rc2 := dialRole(t, h, "chat")
	rc2.send("GET /v1/models HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
	if res, body := rc2.read(); res.StatusCode != http.StatusOK || !strings.Contains(body, `"id":"served"`) {
		t.Fatalf("HTTP/1.0: %d %q", res.StatusCode, body)
	}
}

// TestFastRefusalKeepsConnection checks a refused request whose body the
// handler never reads: a small body is read and dropped so the connection
// serves the next request; a large one is answered, then the connection
// closes without resetting the client before it read the answer.
func TestFastRefusalKeepsConnection(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	h := startProxy(t, Config{MaxBodyBytes: 1 << 20}, Deps{})
	h.resolver.local("chat", up.URL)
	rc := dialRole(t, h, "chat")
	rc.send(post("/v1/nowhere/../x", `{"a":1}`))
	if res, _ := rc.read(); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", res.StatusCode)
	}
	rc.send(post("/unknown", strings.Repeat("x", 100<<10)))
	if res, _ := rc.read(); res.StatusCode != http.StatusNotFound || res.Close {
		t.Fatalf("status %d close %t, want 404 on a kept connection", res.StatusCode, res.Close)
	}
	rc.send(post("/v1/chat/completions", chatBody(false)))
	if res, body := rc.read(); res.StatusCode != http.StatusOK {
		t.Fatalf("after the refusals: %d %q", res.StatusCode, body)
	}
	// Over MaxBodyBytes: 413 at once, the body (2 MiB) is never read.
	big := 2 << 20
	go func() {
		_, _ = io.WriteString(rc.c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"+
			fmt.Sprintf("Content-Length: %d\r\n\r\n", big)+strings.Repeat("x", big))
	}()
	res, body := rc.read()
	if res.StatusCode != http.StatusRequestEntityTooLarge || !res.Close {
		t.Fatalf("status %d close %t (%q), want 413 and the connection closed", res.StatusCode, res.Close, body)
	}
}

// TestClientGoneBeforeHead checks that a client that closes its
// connection while the instance has not answered yet cancels the
// instance's request (the fast reader's watch of the client).
func TestClientGoneBeforeHead(t *testing.T) {
	arrived := make(chan struct{})
	cancelled := make(chan struct{})
	done := make(chan struct{})
	up := proxytest.New(t, proxytest.Options{Hooks: proxytest.Hooks{OnRequest: func(ctx context.Context, _ *http.Request) {
		close(arrived)
		select {
		case <-ctx.Done():
			close(cancelled)
		case <-done: // the test failed; let the upstream close
		}
	}}})
	t.Cleanup(func() { close(done) }) // before the upstream's own cleanup
	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", up.URL)
	rc := dialRole(t, h, "chat")
	// A GET: the upstream's net/http notices its client (the proxy) going
	// away only once the request's body is read, and a GET has none.
	rc.send("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	wait(t, arrived, "the request at the upstream")
	_ = rc.c.Close()
	wait(t, cancelled, "the upstream's request cancelled after the client left")
}

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
