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

// TestHostNoticesReadyWithin100ms: the host notices a starting server's
// health soon after the server is ready (issue 24: within 100 ms), so a
// request held for an on-demand model is forwarded at once. echo-llm
// loads for 300 ms with its port open (503 loading) and writes the
// moment it became ready; the host is ready when its role is registered
// in the table. Median of five starts of a real process. With the fixed
// 100 ms poll of a start the host noticed up to 100 ms late (50 on
// average) before a registration could even begin.
func TestHostNoticesReadyWithin100ms(t *testing.T) {
	c := newCluster(t, clusterOpts{})
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

	readyAt := func() time.Time {
		t.Helper()
		b, err := os.ReadFile(readyFile)
		if err != nil {
			t.Fatalf("echo-llm wrote no ready moment: %v", err)
		}
		at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	waitRegistered := func(round int) time.Time {
		t.Helper()
		select {
		case at := <-registered:
			return at
		case <-time.After(waitTimeout):
			t.Fatalf("start %d: chat never registered", round)
		}
		return time.Time{}
	}

	const starts = 5
	var lags []time.Duration
	var id string
	for round := range starts {
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
		ready := readyAt()
		if ready.Sub(began) < 300*time.Millisecond {
			t.Fatalf("start %d: ready %s after the start, before its load delay", round, ready.Sub(began))
		}
		lags = append(lags, reg.Sub(ready))
		c.stop(t, id)
	}
	slices.Sort(lags)
	median := lags[len(lags)/2]
	t.Logf("from echo-llm ready to chat registered, %d starts: %v (median %s)", starts, lags, median)
	if median >= 100*time.Millisecond {
		t.Errorf("median %s from the server's ready moment to the host's registration, want under 100ms", median)
	}
}
