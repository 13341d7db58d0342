package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// TestIdleConnectionClosedAtHeadTimeout: a connection that sends nothing
// is closed once the head timeout passes rather than held for the
// keep-alive idle timeout (120 s); a connection that sent a request may
// stay idle past it, on the fast reader and on net/http (which serves a
// connection handed off by its first request, here HTTP/1.0) alike.
func TestIdleConnectionClosedAtHeadTimeout(t *testing.T) {
	const headTimeout = 300 * time.Millisecond
	for _, tt := range []struct {
		name  string
		first string
	}{
		{"fast reader", "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"},
		{"net/http", "GET /v1/models HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := proxytest.New(t, proxytest.Options{})
			h := startProxy(t, Config{HeaderTimeout: headTimeout}, Deps{})
			h.resolver.local("chat", up.URL)

			silent := dialRole(t, h, "chat")
			start := time.Now()
			n, err := silent.c.Read(make([]byte, 1))
			took := time.Since(start)
			var ne net.Error
			if n != 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("a silent connection: read %d, %v after %v; want it closed by the proxy", n, err, took)
			}
			if took < headTimeout/2 || took > testDeadline/2 {
				t.Errorf("a silent connection was closed after %v, want about the head timeout %v", took, headTimeout)
			}

			// After a request the connection is kept alive: it is still
			// open well past the head timeout.
			busy := dialRole(t, h, "chat")
			busy.send(tt.first)
			if res, _ := busy.read(); res.StatusCode != http.StatusOK {
				t.Fatalf("request: %d", res.StatusCode)
			}
			_ = busy.c.SetReadDeadline(time.Now().Add(3 * headTimeout))
			if _, err := busy.br.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("an idle kept-alive connection: %v, want it open until the client's deadline", err)
			}
		})
	}
}

// TestConnectionCap: a role's port holds at most MaxConnections client
// connections; the next is closed at once and counted, while requests on
// the connections it holds are still answered. A closed connection makes
// room, and a reload lowers the cap for the next connections without
// closing any.
func TestConnectionCap(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	h := startProxy(t, Config{MaxConnections: 3}, Deps{})
	h.resolver.local("chat", up.URL)
	const req = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
	ok := func(rc *rawConn) {
		t.Helper()
		rc.send(req)
		if res, body := rc.read(); res.StatusCode != http.StatusOK {
			t.Fatalf("request on a held connection: %d %q", res.StatusCode, body)
		}
	}
	refused := func() {
		t.Helper()
		rc := dialRole(t, h, "chat")
		_, _ = io.WriteString(rc.c, req) // may fail: the proxy may have closed it already
		if b, err := io.ReadAll(rc.br); len(b) != 0 || err != nil && !isReset(err) {
			t.Fatalf("a connection over the cap read %q, %v; want it closed unanswered", b, err)
		}
	}
	metric := func(name string) float64 {
		t.Helper()
		v, _ := metricValue(t, h.reg, name, map[string]string{"role": "chat"})
		return v
	}

	held := []*rawConn{dialRole(t, h, "chat"), dialRole(t, h, "chat"), dialRole(t, h, "chat")}
	for _, rc := range held {
		ok(rc)
	}
	refused()
	for _, rc := range held {
		ok(rc)
	}
	if got := metric("nodeld_proxy_connections_refused_total"); got != 1 {
		t.Errorf("nodeld_proxy_connections_refused_total = %v, want 1", got)
	}
	if got := metric("nodeld_proxy_client_connections"); got != 3 {
		t.Errorf("nodeld_proxy_client_connections = %v, want 3", got)
	}

	_ = held[0].c.Close()
	until(t, "the closed connection released", func() bool { return metric("nodeld_proxy_client_connections") == 2 })
	held[0] = dialRole(t, h, "chat")
	ok(held[0])

	cfg := h.p.cfg
	cfg.MaxConnections = 1
	if err := h.p.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	refused()
	for _, rc := range held {
		ok(rc)
	}
	if got := metric("nodeld_proxy_connections_refused_total"); got != 2 {
		t.Errorf("nodeld_proxy_connections_refused_total = %v, want 2", got)
	}
}

// isReset reports whether err is the connection reset by its peer: a
// connection closed with unread bytes may be reset rather than ended.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// until polls cond every few milliseconds until it holds, failing the
// test at testDeadline.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func TestMaxConnectionsValidated(t *testing.T) {
	for _, n := range []int{-1, MaxConnectionsLimit + 1} {
		if err := (Config{MaxConnections: n}).Validate(); err == nil || !strings.Contains(err.Error(), "max connections") {
			t.Errorf("MaxConnections %d: Validate = %v", n, err)
		}
	}
	if got := (Config{}).withDefaults().MaxConnections; got != DefaultMaxConnections {
		t.Errorf("default MaxConnections %d, want %d", got, DefaultMaxConnections)
	}
}
