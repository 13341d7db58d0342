package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/table"
)

// TestIdleUpstreamPoolBounded checks that the idle connections kept to a
// local instance are at most the role's concurrency, and follow it when a
// reload lowers it: a burst of 8 held requests leaves 8 connections; with
// concurrency 2, the next request returns its connection to a pool that
// closes all but 2.
func TestIdleUpstreamPoolBounded(t *testing.T) {
	var opened atomic.Int64
	closed := make(chan struct{}, 16)
	var mu sync.Mutex // guards arrived
	arrived := 0
	all := make(chan struct{})
	release := make(chan struct{})
	up := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			arrived++
			if arrived == 8 {
				close(all)
			}
			n := arrived
			mu.Unlock()
			if n <= 8 {
				<-release
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				opened.Add(1)
			case http.StateClosed:
				closed <- struct{}{}
			}
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close(); <-served })

	cfg := Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 8}}}
	h := startProxy(t, cfg, Deps{})
	h.resolver.local("chat", "http://"+ln.Addr().String())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, h.url("chat")+"/v1/models", nil)
			ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
			defer cancel()
			res, err := h.client.Do(req.WithContext(ctx))
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
		})
	}
	wait(t, all, "8 requests held at the upstream")
	close(release)
	wg.Wait()
	// A response that is not a stream reaches the client when its handler
	// returns, after the connection went back to the pool.
	key := httpfast.PoolKey{Role: "chat", Addr: ln.Addr().String()}
	if n := h.p.pool.IdleConns(key); n != 8 || opened.Load() != 8 {
		t.Fatalf("%d idle connections kept of %d opened, want 8 of 8", n, opened.Load())
	}

	cfg.Roles[0].Concurrency = 2
	if err := h.p.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if res, body := h.get("chat", "/v1/models"); res.StatusCode != http.StatusOK || !strings.Contains(string(body), "ok") {
		t.Fatalf("status %d %s", res.StatusCode, body)
	}
	if n := h.p.pool.IdleConns(key); n != 2 {
		t.Errorf("%d idle connections kept, want the role's concurrency, 2", n)
	}
	for i := range 6 {
		wait(t, closed, "the upstream to see the connections over the bound closed ("+string(rune('1'+i))+" of 6)")
	}
	if opened.Load() != 8 {
		t.Errorf("upstream accepted %d connections, want 8", opened.Load())
	}
}

// TestReusedConnClosedByUpstream checks that a pooled connection the
// instance closed while it was idle does not fail the next request: with
// a streamed body the peek finds it closed, with a pinned (in-memory)
// body the exchange on it fails before any response byte and is sent
// again; either way on a new connection.
func TestReusedConnClosedByUpstream(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		t.Run(map[bool]string{false: "streamed body", true: "pinned body"}[pinned], func(t *testing.T) {
			testReusedConnClosed(t, pinned)
		})
	}
}

func testReusedConnClosed(t *testing.T, pinned bool) {
	var opened atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[]}`))
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	h := startProxy(t, Config{}, Deps{})
	target := table.Target{Kind: table.TargetLocal, Base: up.URL}
	if pinned {
		target.Model = "served"
	}
	h.resolver.set("chat", target)
	if res, body := h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != http.StatusOK {
		t.Fatalf("status %d %s", res.StatusCode, body)
	}
	up.CloseClientConnections()
	for i := range 3 {
		if res, body := h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != http.StatusOK {
			t.Fatalf("request %d after the upstream closed its connections: status %d %s", i, res.StatusCode, body)
		}
	}
	if got := opened.Load(); got != 2 {
		t.Errorf("upstream accepted %d connections, want 2 (one before, one after it closed them)", got)
	}
}
