package plane

import (
	"context"

	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// TestSameNodeRestartsAreNotMoves is the repro: a declared
// workload on a single node whose host restarts (the instance is missing
// though the node answers) more often than max_reschedules, a few
// seconds apart. Each restart places it again on its own node, which is
// no move: it is never lost for good, never capped.
func TestSameNodeRestartsAreNotMoves(t *testing.T) {
	r, hs := newRig(t, 8)
	r.addVersion("echo", "1.0.0", 1, nil)
	r.declare(false, chat)
	r.tick()
	if n := len(r.liveOf("chat")); n != 1 {
		t.Fatalf("%d instances at first", n)
	}
	for i := range r.cfg.MaxReschedules + 2 {
		r.cl.Set(hs[0], func(h *planetest.Host) { clear(h.Instances) }) // the node restarted
		r.clk.Advance(8 * time.Second)
		r.tick()
		if n := len(r.liveOf("chat")); n != 1 {
			t.Fatalf("restart %d: %d instances; alerts %+v", i+1, n, r.entries(KindAlert))
		}
	}
	for _, p := range r.c.Placements() {
		if p.Capped || len(p.Moves) != 0 || p.LastError != "" {
			t.Fatalf("after restarts in place: %+v", p)
		}
	}
	if es := r.entries(KindAlert); len(es) != 0 {
		t.Fatalf("alerts: %+v", es)
	}
}

// TestMovesCountWithinTheWindow: with max_reschedules 1 and a 10 minute
// window, a workload that moved once is capped when its node dies (its
// warn log, gauge and alert say so, and Start clears the cap: it moves at
// the next tick); without the operator the cap lifts by itself once the
// move left the window.
func TestMovesCountWithinTheWindow(t *testing.T) {
	for _, operator := range []bool{true, false} {
		t.Run(map[bool]string{true: "start clears", false: "window passes"}[operator], func(t *testing.T) {
			r, hs := newRig(t, 8, 8, 8)
			r.cfg.MaxReschedules = 1
			r.cfg.RescheduleWindow = 10 * time.Minute
			r.restart()
			core, logs := observer.New(zapcore.WarnLevel)
			r.c.log = zap.New(core)
			r.tick()
			first := hostOf(hs, r.place(echo).Placed.Node)
			r.cl.Kill(first)
			r.clk.Advance(r.cfg.DeadAfter)
			r.tick()
			var moved Placement
			for _, p := range r.c.Placements() {
				if p.Life == LifePlaced {
					moved = p
				}
			}
			if len(moved.Moves) != 1 {
				t.Fatalf("first move: %+v", r.c.Placements())
			}
			r.cl.Revive(first)
			r.step() // the old copy is unloaded
			second := hostOf(hs, moved.Node)
			r.cl.Kill(second)
			r.clk.Advance(r.cfg.DeadAfter)
			r.tick()
			pl := r.mustPlacement(moved.DecisionID)
			if !pl.Capped || pl.Life != LifeLost || r.liveCopies("echo") != 0 {
				t.Fatalf("not capped: %+v", pl)
			}
			if got := testutil.ToFloat64(r.c.met.capped); got != 1 {
				t.Errorf("capped gauge %v", got)
			}
			if logs.FilterMessage("placement capped: lost and not placed again").Len() != 1 {
				t.Errorf("warn logs: %v", logs.All())
			}
			if !chainHas(r.entries(KindAlert), "moved 1 times in the last 10m0s") {
				t.Errorf("alerts: %+v", r.entries(KindAlert))
			}
			if operator {
				// Refused with any other verb; Start clears the cap.
				if _, err := r.c.Start(context.Background(), moved.DecisionID[:16]); err != nil {
					t.Fatal(err)
				}
				if pl := r.mustPlacement(moved.DecisionID); pl.Capped || len(pl.Moves) != 0 {
					t.Fatalf("after start: %+v", pl)
				}
				r.step()
			} else {
				r.clk.Advance(5 * time.Minute)
				r.tick()
				if r.liveCopies("echo") != 0 {
					t.Fatal("moved inside the window")
				}
				r.clk.Advance(5 * time.Minute)
				r.tick()
			}
			if r.liveCopies("echo") != 1 {
				t.Fatalf("not placed again: %+v", r.c.Placements())
			}
			if got := testutil.ToFloat64(r.c.met.capped); got != 0 {
				t.Errorf("capped gauge %v after", got)
			}
		})
	}
}

// TestCappedInstanceRestartsInPlace: past the cap, an instance missing on
// a node that answers is still placed again there (no move).
func TestCappedInstanceRestartsInPlace(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	r.cfg.MaxReschedules = 0
	r.restart()
	r.tick()
	rep := r.place(echo)
	h := hostOf(hs, rep.Placed.Node)
	r.cl.Set(h, func(h *planetest.Host) { clear(h.Instances) })
	r.step()
	ps := r.c.Placements()
	if len(ps) != 1 || ps[0].Life != LifePlaced || ps[0].Node != h.ID || ps[0].Capped {
		t.Fatalf("after a restart past the cap: %+v", ps)
	}
}

func (r *rig) mustPlacement(id string) Placement {
	r.t.Helper()
	for _, p := range r.c.Placements() {
		if p.DecisionID == id {
			return p
		}
	}
	r.t.Fatalf("no placement %s", id)
	return Placement{}
}

// TestReturningNodeWakesBackoffs: a declaration and a lost placement
// wait out a long backoff for room; a node that comes back (alive again)
// wakes both at the next tick, long before their backoff ends.
func TestReturningNodeWakesBackoffs(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	a, b := hs[0], hs[1]
	r.addVersion("big", "1.0.0", 6, nil)
	r.restart() // with the store
	r.cl.Kill(b)
	r.tick()
	rep := r.place(echo) // on a, the only node
	if rep.Placed == nil || rep.Placed.Node != a.ID {
		t.Fatalf("placed %+v", rep.Placed)
	}
	// a fills up; big is declared and does not fit anywhere.
	r.cl.Set(a, func(h *planetest.Host) { h.Facts.MemFreeBytes = 1 << 30 })
	r.declare(true, Workload{Name: "big", Package: "big"})
	// a dies too: echo is lost, and cannot be placed anywhere.
	r.cl.Kill(a)
	// Both back off until each has more than a minute left to wait.
	waiting := func() (declState, Placement, bool) {
		st := r.declState("big")
		var lost Placement
		for _, p := range r.c.Placements() {
			if p.Life == LifeLost {
				lost = p
			}
		}
		soon := r.clk.Now().Add(time.Minute)
		return st, lost, st.NextAttempt.After(soon) && lost.NextAttempt.After(soon)
	}
	for i := 0; ; i++ {
		if _, _, ok := waiting(); ok {
			break
		}
		if i == 1000 {
			st, lost, _ := waiting()
			t.Fatalf("backoffs never both long: %+v; %+v", st, lost)
		}
		r.step()
	}
	// b comes back with room for both: the next tick places them.
	r.cl.Set(b, func(h *planetest.Host) { h.Down = false; h.Facts.MemFreeBytes = 16 << 30 })
	r.step()
	r.step() // a place is seen in b's facts a tick later
	if n := len(r.liveOf("big")); n != 1 {
		t.Errorf("big not placed when b returned: %d; %+v", n, r.declState("big"))
	}
	if n := r.liveCopies("echo"); n != 1 {
		t.Errorf("echo not placed when b returned: %+v", r.c.Placements())
	}
}

func (r *rig) declState(name string) declState {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	if st := r.c.decls[name]; st != nil {
		return *st
	}
	return declState{}
}

// TestPeerStoppedIsDeadAtOnce: a node the mesh reports stopped (its
// link closed for shutdown, not back within the restart wait) is dead
// for the next tick: its instance moves long before dead_after; a node
// silent without a word still waits for dead_after. Back, it is alive.
func TestPeerStoppedIsDeadAtOnce(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	r.tick()
	rep := r.place(echo)
	h := hostOf(hs, rep.Placed.Node)
	r.cl.Kill(h)
	r.step()
	if r.liveCopies("echo") != 0 || r.mustPlacement(rep.DecisionID).Life != LifePlaced {
		t.Fatal("moved before dead_after without a word")
	}
	r.c.PeerStopped(h.ID)
	r.c.PeerStopped("n-not-a-target") // ignored
	r.step()
	if r.liveCopies("echo") != 1 || r.mustPlacement(rep.DecisionID).Life != LifeRescheduled {
		t.Fatalf("a stopped peer's instance did not move: %+v", r.c.Placements())
	}
	if r.clk.Now().Sub(t0) >= r.cfg.DeadAfter {
		t.Fatal("the test took dead_after")
	}
	r.cl.Revive(h)
	r.step()
	for _, n := range r.c.Nodes() {
		if n.ID == h.ID && n.Liveness.String() != "alive" {
			t.Fatalf("back, %s is %s", h.ID, n.Liveness)
		}
	}
}
