package host

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
)

// buildSlowEcho builds the echo-llm package with a load delay: its port
// opens at once, /health answers 503 loading until delay has passed, and
// it writes the moment it became ready to readyFile.
func buildSlowEcho(t *testing.T, key ed25519.PrivateKey, delay time.Duration, readyFile string) testPackage {
	t.Helper()
	p := buildEcho(t, key)
	m := *p.m
	m.Runtime.Args = append(slices.Clone(m.Runtime.Args), "--load-delay", delay.String(), "--ready-file", readyFile)
	return signPackage(t, p.dir, m, key)
}

// TestHostRegistersOnTheStartingProbe: the host registers a starting
// server's role from the probes of its start, the moment one finds it
// ready, not from the supervisor's later health checks (issue 24: a
// request held for an on-demand model is forwarded at once). echo-llm
// loads for 300 ms with its port open (503 loading) and writes the moment
// it became ready; the supervisors' health interval is an hour, so a
// registration that waited for a health check would never come. Each of
// two starts (a placement, then a start of the stopped instance) must
// register chat, after the server's ready moment. The fast schedule of
// those probes is TestStartNoticesReadyOnTheFirstHealthyProbe's
// (internal/runner); the wall-clock bound from ready to registered is
// BenchmarkOnDemandColdStart's (make bench-cold), not a test's.
func TestHostRegistersOnTheStartingProbe(t *testing.T) {
	c := newCluster(t, clusterOpts{healthInterval: time.Hour})
	readyFile := filepath.Join(t.TempDir(), "ready")
	p := buildSlowEcho(t, c.publisher, 300*time.Millisecond, readyFile)

	// registered receives the moment chat became served locally.
	registered := make(chan time.Time, 16)
	sub, unsub := c.hostNode.Table.Subscribe()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		was := false
		for {
			_, ok := c.hostNode.Table.LocalBaseForRole("chat")
			if ok && !was {
				registered <- time.Now()
			}
			was = ok
			select {
			case <-sub:
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done; unsub() })

	// readyAt is echo-llm's ready moment: read before its /health turned
	// 200, written to the file just after, so it may lag the
	// registration by a write.
	readyAt := func(round int) time.Time {
		t.Helper()
		deadline := time.Now().Add(waitTimeout)
		for {
			b, err := os.ReadFile(readyFile)
			if err == nil && len(b) > 0 {
				at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
				if err != nil {
					t.Fatal(err)
				}
				return at
			}
			if time.Now().After(deadline) {
				t.Fatalf("start %d: echo-llm wrote no ready moment: %v", round, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitRegistered := func(round int) time.Time {
		t.Helper()
		select {
		case at := <-registered:
			return at
		case <-time.After(waitTimeout):
			t.Fatalf("start %d: chat not registered in %s with an hour between health checks: "+
				"the start's own probes did not register it", round, waitTimeout)
		}
		return time.Time{}
	}

	var id string
	for round := range 2 {
		_ = os.Remove(readyFile)
		began := time.Now()
		if round == 0 {
			res, _, err := c.place(t, p, true)
			if err != nil {
				t.Fatalf("place: %v", err)
			}
			id = res.InstanceID
		} else {
			c.mustCall(t, ctl.MethodStart, ctl.InstanceParams{InstanceID: id}, newDecision(), nil)
		}
		reg := waitRegistered(round)
		ready := readyAt(round)
		if ready.Sub(began) < 300*time.Millisecond {
			t.Fatalf("start %d: ready %s after the start, before its load delay", round, ready.Sub(began))
		}
		if reg.Before(ready) {
			t.Errorf("start %d: chat registered %s before the server was ready", round, ready.Sub(reg))
		}
		t.Logf("start %d: from echo-llm ready to chat registered: %s", round, reg.Sub(ready))
		c.stop(t, id)
	}
}
