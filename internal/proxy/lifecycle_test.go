package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// runProxy starts Run and returns the proxy, its stop function and Run's
// result channel.
func runProxy(t *testing.T, cfg Config, res Resolver) (*Proxy, context.CancelFunc, <-chan error) {
	t.Helper()
	p, err := New(cfg, Deps{Resolver: res, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	wait(t, p.Ready(), "ready")
	return p, cancel, done
}

func TestShutdownDrainsInflight(t *testing.T) {
	hold, arrived := make(chan struct{}), make(chan struct{}, 1)
	up := proxytest.New(t, proxytest.Options{Hooks: proxytest.Hooks{
		OnRequest: func(ctx context.Context, r *http.Request) {
			arrived <- struct{}{}
			<-hold
		},
	}})
	res := newResolver()
	res.local("chat", up.URL)
	p, stop, done := runProxy(t, Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}}, DrainTimeout: testDeadline}, res)
	addr, _ := p.Addr("chat")

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	status := make(chan int, 1)
	go func() {
		r, err := (&http.Client{Transport: tr}).Post("http://"+addr.String()+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(false)))
		if err != nil {
			status <- -1
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		status <- r.StatusCode
	}()
	wait(t, arrived, "request at the upstream")
	stop()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v with a request in flight", err)
	default:
	}
	close(hold)
	if s := wait(t, status, "drained request"); s != 200 {
		t.Errorf("in-flight request finished with %d, want 200", s)
	}
	if err := wait(t, done, "Run to return"); err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestShutdownCutsStreamsAfterDrainTimeout(t *testing.T) {
	started := make(chan struct{}, 1)
	up := proxytest.New(t, proxytest.Options{Chunks: 2, Hooks: proxytest.Hooks{
		BeforeChunk: func(ctx context.Context, i int) {
			if i == 1 {
				started <- struct{}{}
				<-ctx.Done() // never finishes on its own
			}
		},
	}})
	res := newResolver()
	res.local("chat", up.URL)
	p, stop, done := runProxy(t, Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}}, DrainTimeout: 50 * time.Millisecond}, res)
	addr, _ := p.Addr("chat")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	r, err := (&http.Client{Transport: tr}).Post("http://"+addr.String()+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(true)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	wait(t, started, "stream in progress")
	stop()
	if err := wait(t, done, "Run to return after the drain timeout"); err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, err := io.ReadAll(r.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("stream end: %v, want a cut (unexpected EOF)", err)
	}
	if err := p.ApplyConfig(Config{}); err == nil {
		t.Error("ApplyConfig after Run returned succeeded")
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(Config{}, Deps{}); err == nil {
		t.Error("New without a Resolver succeeded")
	}
	if _, err := New(Config{Roles: []RoleConfig{{Name: "x", Listen: "0.0.0.0:80"}}}, Deps{Resolver: newResolver()}); err == nil {
		t.Error("New with a non-loopback listen address succeeded")
	}
}
