package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"
)

// fakeTransport answers every request with respond, inside a synctest
// bubble.
type fakeTransport func(r *http.Request) (*http.Response, error)

func (f fakeTransport) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// pacedBody yields one event after each gap, then blocks until its request
// is cancelled.
type pacedBody struct {
	ctx   context.Context
	gaps  []time.Duration
	sent  int
	start time.Time
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.sent < len(b.gaps) {
		// Fake time: the upstream's pace. Like a real transport, a read
		// ends when the request is cancelled.
		gap := time.NewTimer(b.gaps[b.sent])
		defer gap.Stop()
		select {
		case <-gap.C:
		case <-b.ctx.Done():
			return 0, context.Cause(b.ctx)
		}
		b.sent++
		return copy(p, "data: x\n\n"), nil
	}
	<-b.ctx.Done()
	return 0, context.Cause(b.ctx)
}

func (b *pacedBody) Close() error { return nil }

// serveOnce runs one request through a role handler of a proxy using tr,
// with a server context so a cut stream panics as under net/http. It
// returns the recorder, the fake time taken and whether the stream was cut.
func serveOnce(t *testing.T, cfg Config, tr http.RoundTripper) (rec *httptest.ResponseRecorder, took time.Duration, cut bool) {
	t.Helper()
	res := newResolver()
	res.local("chat", "http://127.0.0.1:9")
	cfg.Roles = []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}}
	p, err := New(cfg, Deps{Resolver: res, Transport: tr, Logger: zaptest.NewLogger(t)})
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
		tr := fakeTransport(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		})
		rec, took, cut := serveOnce(t, Config{StallTimeout: 120 * time.Second}, tr)
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
		tr := fakeTransport(func(r *http.Request) (*http.Response, error) {
			return &http.Response{
				StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, ContentLength: -1,
				Body: &pacedBody{ctx: r.Context(), gaps: []time.Duration{0, 100 * time.Second, 100 * time.Second}},
			}, nil
		})
		rec, took, cut := serveOnce(t, Config{StallTimeout: 120 * time.Second}, tr)
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
		tr := fakeTransport(func(r *http.Request) (*http.Response, error) {
			gaps := make([]time.Duration, 100)
			for i := range gaps {
				gaps[i] = 50 * time.Second
			}
			return &http.Response{
				StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, ContentLength: -1,
				Body: &pacedBody{ctx: r.Context(), gaps: gaps},
			}, nil
		})
		_, took, cut := serveOnce(t, Config{StallTimeout: 120 * time.Second, RequestTimeout: 300 * time.Second}, tr)
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
		tr := fakeTransport(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, errors.New("transport gave up")
		})
		rec, took, _ := serveOnce(t, Config{StallTimeout: 120 * time.Second, RequestTimeout: 30 * time.Second}, tr)
		if rec.Code != http.StatusGatewayTimeout || took != 30*time.Second {
			t.Fatalf("status %d after %s, want 504 after 30s", rec.Code, took)
		}
		if !strings.Contains(rec.Body.String(), "request took longer than 30s") {
			t.Errorf("body %s", rec.Body.String())
		}
	})
}
