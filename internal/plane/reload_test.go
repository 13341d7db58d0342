package plane

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/nodeld/nodeld/internal/engine"
)

// ticks is how many lifecycle ticks c has run.
func ticks(t *testing.T, c *Controller) uint64 {
	t.Helper()
	var m dto.Metric
	if err := c.met.tick.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestReloadChangesTickPeriod: a reload that changes tick takes effect in
// the running loop: Run rebuilds its ticker with the new period.
func TestReloadChangesTickPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRig(t, 8)
		r.cfg.Tick, r.cfg.DeadAfter = time.Hour, 3*time.Hour
		r.restart()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.c.Run(ctx) }()
		synctest.Wait()

		next := r.cfg
		next.Tick = time.Second
		p, err := r.c.Prepare(next, r.targets)
		if err != nil {
			t.Fatal(err)
		}
		if r.c.conf().Tick != time.Hour {
			t.Fatal("Prepare changed the config")
		}
		p.Commit()
		synctest.Wait()
		before := ticks(t, r.c)
		time.Sleep(4*time.Second + time.Millisecond)
		synctest.Wait()
		if got := ticks(t, r.c) - before; got != 4 {
			t.Errorf("%d ticks in 4s after tick became 1s, want 4", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
	})
}

// tierOf is node id's tier among c's targets ("none" when it is none).
func tierOf(c *Controller, id string) string {
	for _, n := range c.Nodes() {
		if n.ID == id {
			return n.Tier.String()
		}
	}
	return "none"
}

// TestReloadTargetsAppliedByRun: Run applies the targets a reload hands
// over as soon as no tick runs, without waiting for the next tick.
func TestReloadTargetsAppliedByRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRig(t, 8, 8)
		r.cfg.Tick, r.cfg.DeadAfter = time.Hour, 3*time.Hour
		r.restart()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.c.Run(ctx) }()
		synctest.Wait()

		ts := append([]Target(nil), r.targets...)
		ts[0].Tier = engine.TrustDiscovered
		p, err := r.c.Prepare(r.cfg, ts)
		if err != nil {
			t.Fatal(err)
		}
		if got := tierOf(r.c, ts[0].ID); got != engine.TrustPaired.String() {
			t.Fatalf("tier %v before the commit, want paired", got)
		}
		p.Commit()
		synctest.Wait()
		if got := tierOf(r.c, ts[0].ID); got != engine.TrustDiscovered.String() {
			t.Errorf("tier %v after the commit, want discovered (applied by Run)", got)
		}
		if n := ticks(t, r.c); n != 0 {
			t.Errorf("%d ticks ran, want none (tick is 1h)", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
	})
}

// TestPrepareRefusesAndChangesNothing: a bad config or target list is
// refused with every problem, and the controller keeps what is in force.
func TestPrepareRefusesAndChangesNothing(t *testing.T) {
	r, _ := newRig(t, 8)
	bad := r.cfg
	bad.Tick = 0
	_, err := r.c.Prepare(bad, []Target{{ID: "x"}})
	if err == nil || !strings.Contains(err.Error(), "controller: ") || !strings.Contains(err.Error(), "controller targets: ") {
		t.Fatalf("Prepare = %v, want the config's and the targets' problems", err)
	}
	r.tick()
	if r.c.conf().Tick != r.cfg.Tick || tierOf(r.c, r.targets[0].ID) != engine.TrustPaired.String() {
		t.Error("a refused reload changed the controller")
	}
}

// TestTickAppliesWhatIsDue: without Run (a test that ticks itself), the
// next Tick applies a handed-over config and targets first.
func TestTickAppliesWhatIsDue(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	ts := append([]Target(nil), r.targets...)
	ts[1].Tier = engine.TrustDiscovered
	next := r.cfg
	next.Tick = 2 * r.cfg.Tick
	r.c.Reconfigure(next, ts)
	if tierOf(r.c, ts[1].ID) != engine.TrustPaired.String() || r.c.conf().Tick != r.cfg.Tick {
		t.Fatal("Reconfigure applied before a tick")
	}
	r.tick()
	if tierOf(r.c, ts[1].ID) != engine.TrustDiscovered.String() || r.c.conf().Tick != next.Tick {
		t.Error("the tick did not apply what was due")
	}
}
