package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// trickle sends a POST to role's port over a real TCP connection: a head
// declaring a body of size bytes, then one body byte every gap, never the
// last one. It returns the proxy's answer, read as it comes while the
// trickle goes on, and how long after the head it came.
func (h *harness) trickle(role, path string, size int, gap time.Duration) (*http.Response, []byte, time.Duration) {
	h.t.Helper()
	addr, _ := h.p.Addr(role)
	conn, err := net.DialTimeout("tcp", addr.String(), testDeadline)
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	head := "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(size) + "\r\n\r\n"
	// The clock starts before the head is sent: the proxy's deadline runs
	// from when it read the head, which may come before a clock read
	// after the write returns.
	start := time.Now()
	if _, err := io.WriteString(conn, head); err != nil {
		h.t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(gap) // the client's pace
		defer tick.Stop()
		for range size - 1 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{' '}); err != nil {
				return
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	_ = conn.SetReadDeadline(time.Now().Add(testDeadline))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		h.t.Fatalf("no answer while trickling a body: %v", err)
	}
	took := time.Since(start)
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, body, took
}

// TestTrickledBodyFreesSlot checks that a client sending its body a byte at
// a time is answered 408 once BodyTimeout has passed and that its
// concurrency slot is then free, on both paths (and on the local one both
// when the body streams to the instance and when it is read to pin its
// model). On the local path the stall timeout does not cover it: every
// body byte counts as activity.
func TestTrickledBodyFreesSlot(t *testing.T) {
	const bodyTimeout = 600 * time.Millisecond
	cfg := Config{
		Roles:       []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 1}},
		BodyTimeout: bodyTimeout,
		// Shorter than the body timeout, and never reached by a trickle
		// (a byte every 20 ms): 15 gaps' worth, so a client or a proxy
		// goroutine descheduled on a loaded machine does not pass for a
		// stalled upstream (it did at 100 ms, load average 20).
		StallTimeout: 300 * time.Millisecond,
	}
	var forwarded atomic.Int64
	remote := remoteFunc(func(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter) error {
		forwarded.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"from":"`+nodeID+`"}`)
		return nil
	})
	for _, tt := range []struct {
		name, route string
		target      func(base string) table.Target
	}{
		{"local streamed", routeLocal, func(base string) table.Target { return table.Target{Kind: table.TargetLocal, Base: base} }},
		{"local pinned", routeLocal, func(base string) table.Target {
			return table.Target{Kind: table.TargetLocal, Base: base, Model: "m"}
		}},
		{"remote", routeRemote, func(string) table.Target { return table.Target{Kind: table.TargetRemote, NodeID: "node-b"} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			route := tt.route
			up := proxytest.New(t, proxytest.Options{})
			h := startProxy(t, cfg, Deps{Remote: remote})
			h.resolver.set("chat", tt.target(up.URL))
			forwarded.Store(0)

			res, body, took := h.trickle("chat", "/v1/chat/completions", 1000, 20*time.Millisecond)
			if res.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d, want 408 (body %s)", res.StatusCode, body)
			}
			if got := apiError(t, res, body); got.Code != CodeBodyTimeout || got.Type != TypeTimeout {
				t.Errorf("error %+v, want code %s", got, CodeBodyTimeout)
			}
			if took < bodyTimeout {
				t.Errorf("answered after %v, before the body timeout %v", took, bodyTimeout)
			}
			meshtest.WaitFor(t, "the trickling request's slot to be released", func() bool {
				n, _ := h.p.Inflight("chat")
				return n == 0
			})
			if v, _ := metricValue(t, h.reg, "nodeld_proxy_requests_total", map[string]string{"role": "chat", "route": route, "code": "408"}); v != 1 {
				t.Errorf("requests_total{code=408} = %v, want 1", v)
			}
			if route == routeRemote && forwarded.Load() != 0 {
				t.Errorf("a trickled body was forwarded to the peer")
			}
			// The one slot serves the next request.
			if res, body := h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != http.StatusOK {
				t.Fatalf("next request: status %d (body %s)", res.StatusCode, body)
			}
		})
	}
}

// TestBodyDeadlineEndsWithBody checks that the body deadline ends with the
// body: an answer that takes longer than BodyTimeout after a complete body
// is relayed, not cut (net/http clears the connection's read deadline when
// the body has been read; see bodyReader).
func TestBodyDeadlineEndsWithBody(t *testing.T) {
	const bodyTimeout = 200 * time.Millisecond
	slow := func(ctx context.Context) {
		t := time.NewTimer(3 * bodyTimeout) // the instance's pace
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	remote := remoteFunc(func(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter) error {
		slow(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"from":"`+nodeID+`"}`)
		return nil
	})
	for _, route := range []string{routeLocal, routeRemote} {
		t.Run(route, func(t *testing.T) {
			up := proxytest.New(t, proxytest.Options{Hooks: proxytest.Hooks{
				OnRequest: func(ctx context.Context, _ *http.Request) { slow(ctx) },
			}})
			h := startProxy(t, Config{BodyTimeout: bodyTimeout}, Deps{Remote: remote})
			if route == routeLocal {
				h.resolver.local("chat", up.URL)
			} else {
				h.resolver.set("chat", table.Target{Kind: table.TargetRemote, NodeID: "node-b"})
			}
			res, body := h.post("chat", "/v1/chat/completions", chatBody(false))
			// A cancelled request would leave net/http's empty 200.
			want := map[string]string{routeLocal: "hello from test-model", routeRemote: `{"from":"node-b"}`}[route]
			if res.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
				t.Fatalf("status %d, body %q; want 200 with %q", res.StatusCode, body, want)
			}
		})
	}
}
