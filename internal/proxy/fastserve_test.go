package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

// TestClientGoneAfterQuickExchanges: the client watch's timer is the
// connection's, left armed across exchanges; a request after many quick
// ones, waiting on its upstream, still has its client's going away seen
// and its upstream request cancelled.
func TestClientGoneAfterQuickExchanges(t *testing.T) {
	waiting, sawCancel := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "slow") {
			close(waiting)
			<-r.Context().Done()
			close(sawCancel)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(up.Close)
	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", up.URL)
	rc := dialRole(t, h, "chat")
	for i := range 20 {
		rc.send(post("/v1/chat/completions", `{"model":"x"}`))
		if res, body := rc.read(); res.StatusCode != http.StatusOK {
			t.Fatalf("quick request %d: %d %s", i, res.StatusCode, body)
		}
	}
	rc.send(post("/v1/chat/completions", `{"model":"slow"}`))
	wait(t, waiting, "the slow request at the upstream")
	_ = rc.c.Close()
	wait(t, sawCancel, "the upstream to see its request cancelled")
}
