package runner

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"
)

// loadingServer answers a process kind's GET /health in a synctest bubble
// like a server loading a model: 503 until readyAt (bubble time), 200
// from then on. It records the bubble time of every probe.
type loadingServer struct {
	began   time.Time
	readyAt time.Duration

	mu     sync.Mutex
	probes []time.Duration
}

func (s *loadingServer) RoundTrip(req *http.Request) (*http.Response, error) {
	at := time.Since(s.began)
	s.mu.Lock()
	s.probes = append(s.probes, at)
	s.mu.Unlock()
	code, body := http.StatusServiceUnavailable, `{"status":"loading"}`
	if at >= s.readyAt {
		code, body = http.StatusOK, `{"status":"ok"}`
	}
	return &http.Response{StatusCode: code, Header: http.Header{}, Request: req,
		Body: io.NopCloser(strings.NewReader(body))}, nil
}

func (s *loadingServer) seen() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.probes...)
}

// TestStartNoticesReadyOnTheFirstHealthyProbe: a starting server is
// probed on the fast schedule (every startPollFast from its spawn) and
// Start returns on the first probe that finds it up, so the host
// registers the role within one fast pause of the server's ready moment
// (issue 24). Bubble time, not wall time: the wall-clock bound of a real
// cold start is BenchmarkOnDemandColdStart's (make bench-cold). The
// server becomes ready 310 ms after the spawn, between two probes: Start
// must return at the 325 ms probe. A slower poll (300 ms: probes at 0,
// 300, 600) or a wait for a second healthy probe (350 ms) fails.
func TestStartNoticesReadyOnTheFirstHealthyProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &loadingServer{began: time.Now(), readyAt: 310 * time.Millisecond}
		d := &procDriver{
			driverDeps: driverDeps{log: zaptest.NewLogger(t), now: time.Now, client: &http.Client{Transport: srv}},
			kind:       processKind("/health"),
			spec:       Spec{Kind: KindProcess, HealthPath: "/health", StartTimeout: time.Minute},
		}
		// The run's process never exits: waitUp ends only on a probe.
		r := &procRun{done: make(chan struct{})}

		returned := make(chan error, 1)
		go func() { returned <- d.waitUp(t.Context(), r, 1) }()
		var err error
		select {
		case err = <-returned:
		case <-time.After(time.Minute):
			t.Fatal("waitUp still waiting a bubble minute after the server became ready")
		}
		took := time.Since(srv.began)
		if err != nil {
			t.Fatalf("waitUp = %v", err)
		}

		const want = 325 * time.Millisecond // the first probe at or after 310 ms
		if took != want {
			t.Errorf("waitUp returned %s after the spawn, want %s (the first probe after the server was ready at %s)",
				took, want, srv.readyAt)
		}
		probes := srv.seen()
		for i, at := range probes {
			if w := time.Duration(i) * startPollFast; at != w {
				t.Fatalf("probe %d at %s, want %s (every %s from the spawn): %v", i, at, w, startPollFast, probes)
			}
		}
		if last := probes[len(probes)-1]; last != want {
			t.Errorf("last probe at %s, want the first healthy one at %s: %v", last, want, probes)
		}
	})
}
