package plane

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/plane/planetest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// starts counts the start calls the fake cluster got.
func (r *rig) starts() int {
	r.cl.Mu.Lock()
	defer r.cl.Mu.Unlock()
	n := 0
	for _, c := range r.cl.Calls {
		if strings.HasPrefix(c, "start ") {
			n++
		}
	}
	return n
}

// setAll sets the state every host reports for every instance.
func (r *rig) setAll(state string) {
	r.setState("1.0.0", state)
}

// TestFailedInstanceStartedAgain: an instance its host reports failed
// (the supervisor's budget spent), of a declared workload or of an
// operator's placement, is started again by the controller at the next
// tick, chained first and counted; failing again, it is started again
// after the reschedule backoff, doubling, and never given up while its
// start is refused; running past its backoff, it is recovered.
func TestFailedInstanceStartedAgain(t *testing.T) {
	for _, declared := range []bool{true, false} {
		t.Run(map[bool]string{true: "declared", false: "operator"}[declared], func(t *testing.T) {
			r, hs := newRig(t, 8)
			if declared {
				r.addVersion("echo", "1.0.0", 1, nil)
				r.declare(false, chat)
				r.tick()
			} else {
				r.tick()
				r.place(echo)
			}
			if r.liveCopies("echo") != 1 {
				t.Fatalf("not placed: %+v", r.c.Placements())
			}
			id := r.c.Placements()[0].DecisionID
			r.setAll(ctl.StateFailed)
			r.step()
			if r.starts() != 1 || r.instanceStates()[0] != ctl.StateRunning {
				t.Fatalf("failed instance not started again: %d starts, states %v", r.starts(), r.instanceStates())
			}
			if got := testutil.ToFloat64(r.c.met.restarts.WithLabelValues(outStarted)); got != 1 {
				t.Errorf("restarts counter %v", got)
			}
			if !chainHas(r.entries(KindLifecycle), "starting again: its node reports the instance failed") {
				t.Error("restart not chained")
			}
			if p := r.mustPlacement(id); p.FailedSince.IsZero() || p.Attempts != 1 {
				t.Fatalf("after the restart: %+v", p)
			}
			// Fails again at once: started again only after the backoff.
			r.setAll(ctl.StateFailed)
			r.step()
			if r.starts() != 1 {
				t.Fatal("started again inside the backoff")
			}
			// Its start is refused from now on: retried with a doubling
			// backoff, never given up.
			r.cl.Set(hs[0], func(h *planetest.Host) {
				h.StartErr = ctl.NewRefusal(ctl.CodeRuntime, "start failed: connection refused")
			})
			var at []time.Time
			last := r.starts()
			for target := last + 7; r.starts() < target; {
				r.step()
				if n := r.starts(); n != last {
					at, last = append(at, r.clk.Now()), n
				}
				if r.clk.Now().Sub(t0) > 3*time.Hour {
					t.Fatalf("restarts stopped: %d starts %v; %+v; %v", r.starts(), at, r.mustPlacement(id), r.instanceStates())
				}
			}
			for i := 2; i < len(at); i++ {
				if g0, g1 := at[i-1].Sub(at[i-2]), at[i].Sub(at[i-1]); g1 < g0 || g1 > MaxBackoff+r.cfg.Tick {
					t.Errorf("gaps %s then %s", g0, g1)
				}
			}
			if at[len(at)-1].Sub(at[len(at)-2]) < MaxBackoff {
				t.Errorf("backoff did not reach %s: %v", MaxBackoff, at)
			}
			if got := testutil.ToFloat64(r.c.met.restarts.WithLabelValues(outFailed)); got != 7 {
				t.Errorf("failed restarts counter %v", got)
			}
			if !chainHas(r.entries(KindAlert), "failed instance not started again") {
				t.Error("failed start not alerted")
			}
			// The server is back: the next start works and it runs; past
			// the backoff it is no longer failing.
			r.cl.Set(hs[0], func(h *planetest.Host) { h.StartErr = nil })
			for r.instanceStates()[0] != ctl.StateRunning {
				r.step()
			}
			for range 70 {
				r.step()
			}
			if p := r.mustPlacement(id); !p.FailedSince.IsZero() || p.Attempts != 0 || p.Life != LifePlaced {
				t.Fatalf("after recovery: %+v", p)
			}
			if !chainHas(r.entries(KindLifecycle), "running again after") {
				t.Error("recovery not chained")
			}
		})
	}
}

// TestStoppedInstanceNotStartedAgain: an instance the operator stopped
// through the controller is not started again, failed or not.
func TestStoppedInstanceNotStartedAgain(t *testing.T) {
	r, _ := newRig(t, 8)
	r.tick()
	rep := r.place(echo)
	if _, err := r.c.Stop(t.Context(), rep.DecisionID); err != nil {
		t.Fatal(err)
	}
	r.setAll(ctl.StateFailed)
	for range 5 {
		r.step()
	}
	if r.starts() != 0 {
		t.Fatalf("%d starts of a stopped instance", r.starts())
	}
}

// instanceStates lists the states of every instance, by node.
func (r *rig) instanceStates() []string {
	var out []string
	for _, c := range r.instancesOf("chat") {
		out = append(out, c.state)
	}
	if len(out) > 0 {
		return out
	}
	r.cl.Mu.Lock()
	defer r.cl.Mu.Unlock()
	for _, h := range r.cl.Hosts {
		for _, in := range h.Instances {
			out = append(out, in.Lifecycle)
		}
	}
	return out
}
