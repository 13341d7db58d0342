package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"
)

// pipeUpstream is a fake local instance serving h over in-memory
// connections, which a synctest bubble can wait on: its dial is the
// proxy's Deps.Dial, whatever the address.
type pipeUpstream struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// newPipeUpstream serves h until the test ends.
func newPipeUpstream(t *testing.T, h http.Handler) *pipeUpstream {
	u := &pipeUpstream{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(u) }()
	t.Cleanup(func() { _ = srv.Close() })
	return u
}

func (u *pipeUpstream) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case u.conns <- server:
		return client, nil
	case <-u.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (u *pipeUpstream) Accept() (net.Conn, error) {
	select {
	case c := <-u.conns:
		return c, nil
	case <-u.done:
		return nil, net.ErrClosed
	}
}

func (u *pipeUpstream) Close() error { u.once.Do(func() { close(u.done) }); return nil }

func (u *pipeUpstream) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9} }

// pacedEvents writes one event after each gap (fake time: the upstream's
// pace), then holds the stream until the request is cancelled.
func pacedEvents(gaps []time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // from here net/http watches for the client going away
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for _, gap := range gaps {
			select {
			case <-time.After(gap):
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, "data: x\n\n")
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}
}

// silent answers nothing until the request is cancelled.
func silent(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}

// serveOnce runs one request through a role handler of a proxy whose
// local instance is up, with a server context so a cut stream panics as under net/http. It
// returns the recorder, the fake time taken and whether the stream was cut.
func serveOnce(t *testing.T, cfg Config, up http.HandlerFunc) (rec *httptest.ResponseRecorder, took time.Duration, cut bool) {
	t.Helper()
	res := newResolver()
	res.local("chat", "http://127.0.0.1:9")
	cfg.Roles = []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}}
	p, err := New(cfg, Deps{Resolver: res, Dial: newPipeUpstream(t, up).dial, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	h := &roleHandler{p: p, rs: p.roles["chat"]}
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody(true)))
	req.Host = "127.0.0.1"
	req = req.WithContext(context.WithValue(req.Context(), http.ServerContextKey, &http.Server{}))
	rec = httptest.NewRecorder()
	start := time.Now()
	func() {
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					panic(v)
				}
				cut = true
			}
		}()
		h.ServeHTTP(rec, req)
	}()
	return rec, time.Since(start), cut
}

func TestStallBeforeHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec, took, cut := serveOnce(t, Config{StallTimeout: 120 * time.Second}, silent)
		if cut || rec.Code != http.StatusGatewayTimeout {
			t.Fatalf("status %d cut %t, want 504", rec.Code, cut)
		}
		res := rec.Result()
		body, _ := io.ReadAll(res.Body)
		if got := apiError(t, res, body); got.Code != CodeUpstreamTimeout || !strings.Contains(got.Message, "did not answer within 2m0s") {
			t.Errorf("error %+v", got)
		}
		if took != 120*time.Second {
			t.Errorf("answered after %s, want the stall timeout 2m0s", took)
		}
	})
}

func TestStallAfterHeadCuts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := pacedEvents([]time.Duration{0, 100 * time.Second, 100 * time.Second})
		rec, took, cut := serveOnce(t, Config{StallTimeout: 120 * time.Second}, up)
		if !cut {
			t.Fatal("stalled stream was not cut")
		}
		if rec.Code != 200 || rec.Body.String() != strings.Repeat("data: x\n\n", 3) {
			t.Errorf("status %d body %q", rec.Code, rec.Body.String())
		}
		// Events at 0, 100 s and 200 s each reset the stall timer.
		if want := 320 * time.Second; took != want {
			t.Errorf("cut after %s, want %s", took, want)
		}
	})
}

func TestRequestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gaps := make([]time.Duration, 100)
		for i := range gaps {
			gaps[i] = 50 * time.Second
		}
		_, took, cut := serveOnce(t, Config{StallTimeout: 120 * time.Second, RequestTimeout: 300 * time.Second}, pacedEvents(gaps))
		if !cut {
			t.Fatal("stream over the request timeout was not cut")
		}
		if took != 300*time.Second {
			t.Errorf("cut after %s, want 5m0s", took)
		}
	})
}

func TestRequestTimeoutBeforeHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec, took, _ := serveOnce(t, Config{StallTimeout: 120 * time.Second, RequestTimeout: 30 * time.Second}, silent)
		if rec.Code != http.StatusGatewayTimeout || took != 30*time.Second {
			t.Fatalf("status %d after %s, want 504 after 30s", rec.Code, took)
		}
		if !strings.Contains(rec.Body.String(), "request took longer than 30s") {
			t.Errorf("body %s", rec.Body.String())
		}
	})
}
