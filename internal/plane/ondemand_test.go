package plane

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane/planetest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// odIdle is the on-demand settings of the tests: idle after a minute,
// resident for a minute.
var odIdle = OnDemand{IdleAfter: time.Minute, MinResidency: time.Minute, MaxWait: 30 * time.Second}

// onDemandRig is a controller on three 8 GiB nodes, the first of them its
// own node, with workload "chat" of inference package llm (role chat)
// declared on demand with od, cold after one tick.
func onDemandRig(t *testing.T, od OnDemand) (*rig, []*planetest.Host) {
	t.Helper()
	r, hs := newRig(t, 8, 8, 8)
	r.cfg.Policy.Kinds[pkg.KindInference] = KindRule{MinTier: engine.TrustPaired}
	for i := range r.targets {
		r.targets[i].Self = r.targets[i].ID == hs[0].ID
	}
	r.addVersion("llm", "1.0.0", 1, func(m *pkg.Manifest) { m.Kind, m.Role = pkg.KindInference, "chat" })
	r.declare(false, Workload{Name: "chat", Package: "llm", OnDemand: &od})
	r.tick()
	return r, hs
}

// demand demands role chat from node, failing the test on an error.
func (r *rig) demand(node string) string {
	r.t.Helper()
	return r.demandRole("chat", node)
}

// demandRole demands role from node, failing the test on an error.
func (r *rig) demandRole(role, node string) string {
	r.t.Helper()
	state, err := r.c.Demand(context.Background(), role, node)
	if err != nil {
		r.t.Fatalf("Demand %s from %s: %v", role, node, err)
	}
	return state
}

// odState is workload chat's on-demand state as Declarations shows it.
func (r *rig) odState() string {
	r.t.Helper()
	for _, d := range r.c.Declarations() {
		if d.Name == "chat" {
			return d.OnDemand
		}
	}
	r.t.Fatal("chat is not declared")
	return ""
}

// setActivity sets the activity every host reports for the instances of
// workload name.
func (r *rig) setActivity(name string, inFlight int64, last time.Time) {
	r.cl.Mu.Lock()
	defer r.cl.Mu.Unlock()
	for _, h := range r.cl.Hosts {
		for iid, in := range h.Instances {
			if h.Meta[iid].Workload == name {
				in.Activity = &ctl.InstanceActivity{InFlight: inFlight, LastRequest: last}
				h.Instances[iid] = in
			}
		}
	}
}

// readyChat demands chat from the controller's own node and ticks until
// it runs: placed on one tick, seen ready on the next.
func readyChat(t *testing.T, r *rig, self string) {
	t.Helper()
	if got := r.demand(self); got != OnDemandStarting {
		t.Fatalf("demand of a cold workload says %s, want starting", got)
	}
	r.tick()
	r.tick()
	r.setActivity("chat", 0, r.clk.Now())
	r.tick()
	if got := r.odState(); got != OnDemandReady {
		t.Fatalf("state %s after the place, want ready", got)
	}
	if n := len(r.liveOf("chat")); n != 1 {
		t.Fatalf("%d instances, want 1", n)
	}
}

func TestOnDemandColdUntilDemanded(t *testing.T) {
	r, hs := onDemandRig(t, odIdle)
	r.tick()
	if n := r.placeCalls(); n != 0 {
		t.Fatalf("%d places of a cold on-demand workload, want 0", n)
	}
	if got := r.odState(); got != OnDemandCold {
		t.Fatalf("state %s, want cold", got)
	}
	sb := r.c.Standby()
	if len(sb) != 1 || sb[0].Role != "chat" || sb[0].Workload != "chat" || sb[0].State != OnDemandCold || sb[0].MaxWait != odIdle.MaxWait {
		t.Fatalf("standby %+v", sb)
	}
	readyChat(t, r, hs[0].ID)
	if n := r.placeCalls(); n != 1 {
		t.Fatalf("%d places, want 1", n)
	}
	// A demand of a workload ready changes nothing.
	if got := r.demand(hs[0].ID); got != OnDemandReady {
		t.Fatalf("demand of a ready workload says %s", got)
	}
	r.tick()
	if n := r.placeCalls(); n != 1 {
		t.Fatalf("%d places after a second demand, want 1", n)
	}
	if got := testutil.ToFloat64(r.c.met.coldStarts.WithLabelValues("chat")); got != 1 {
		t.Fatalf("cold starts %v, want 1", got)
	}
	var dec decisionRecord
	for _, e := range r.entries(KindDecision) {
		if err := json.Unmarshal(e.Payload, &dec); err != nil {
			t.Fatal(err)
		}
	}
	if dec.Reason != "on_demand" || dec.Declared != "chat" {
		t.Fatalf("decision chained as %+v", dec)
	}
}

func TestOnDemandConcurrentDemandsPlaceOnce(t *testing.T) {
	r, hs := onDemandRig(t, odIdle)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			if _, err := r.c.Demand(context.Background(), "chat", hs[0].ID); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r.tick()
	r.tick()
	if n := r.placeCalls(); n != 1 {
		t.Fatalf("%d places after 50 demands, want 1", n)
	}
	r.wantCopies("llm", 1)
	if got := testutil.ToFloat64(r.c.met.demands.WithLabelValues("accepted")); got != 1 {
		t.Fatalf("%v demands accepted, want 1", got)
	}
}

func TestOnDemandRefusesNodeNotAllowed(t *testing.T) {
	od := odIdle
	r, hs := onDemandRig(t, od)
	_, err := r.c.Demand(context.Background(), "chat", hs[1].ID)
	de, ok := errors.AsType[*DemandError](err)
	if !ok || de.Code != DemandNotAllowed || de.Workload != "chat" {
		t.Fatalf("demand from a node not allowed: %v", err)
	}
	_, err = r.c.Demand(context.Background(), "nope", hs[0].ID)
	if de, ok := errors.AsType[*DemandError](err); !ok || de.Code != DemandUnknownRole {
		t.Fatalf("demand of an unknown role: %v", err)
	}
	r.tick()
	if n := r.placeCalls(); n != 0 || r.odState() != OnDemandCold {
		t.Fatalf("%d places after refused demands (state %s)", n, r.odState())
	}
	// Listed in demand_from, the node may.
	od.DemandFrom = []string{hs[1].ID}
	r.declare(false, Workload{Name: "chat", Package: "llm", OnDemand: &od})
	if got := r.demand(hs[1].ID); got != OnDemandStarting {
		t.Fatalf("demand from a listed node says %s", got)
	}
	r.tick()
	r.wantCopies("llm", 1)
}

func TestOnDemandIdleUnload(t *testing.T) {
	r, hs := onDemandRig(t, odIdle)
	readyChat(t, r, hs[0].ID)
	last := r.clk.Now()
	// Inside idle_after (and min_residency): kept.
	r.clk.Advance(odIdle.IdleAfter - time.Second)
	r.tick()
	if got := r.odState(); got != OnDemandIdle {
		t.Fatalf("state %s a while after the last request, want idle", got)
	}
	if ps := r.c.Placements(); len(ps) != 1 || ps[0].OnDemand != OnDemandIdle {
		t.Fatalf("placements %+v, want chat's shown idle", ps)
	}
	r.wantCopies("llm", 1)
	// A request in flight: never unloaded, however old the last answer.
	r.setActivity("chat", 1, last)
	r.clk.Advance(time.Hour)
	r.tick()
	r.wantCopies("llm", 1)
	if got := r.odState(); got != OnDemandReady {
		t.Fatalf("state %s with a request in flight, want ready", got)
	}
	// None in flight and none for idle_after: unloaded, cold.
	r.setActivity("chat", 0, last)
	r.tick()
	r.wantCopies("llm", 0)
	if got := r.odState(); got != OnDemandCold {
		t.Fatalf("state %s after the idle unload, want cold", got)
	}
	if got := testutil.ToFloat64(r.c.met.idleUnloads.WithLabelValues("chat")); got != 1 {
		t.Fatalf("idle unloads %v, want 1", got)
	}
	found := false
	for _, e := range r.entries(KindLifecycle) {
		var rec lifecycleRecord
		if err := json.Unmarshal(e.Payload, &rec); err != nil {
			t.Fatal(err)
		}
		found = found || (rec.Workload == "chat" && rec.To == string(LifeRetiring) && strings.HasPrefix(rec.Reason, "idle: "))
	}
	if !found {
		t.Fatal("the idle unload is not chained with its reason")
	}
	r.tick()
	if n := r.placeCalls(); n != 1 {
		t.Fatalf("%d places after the idle unload, want 1 (cold stays cold)", n)
	}
	// A demand after the unload starts it again.
	readyChat(t, r, hs[0].ID)
	if n := r.placeCalls(); n != 2 {
		t.Fatalf("%d places, want 2", n)
	}
}

func TestOnDemandNoActivityNeverIdle(t *testing.T) {
	r, hs := onDemandRig(t, odIdle)
	readyChat(t, r, hs[0].ID)
	// A host that reports no activity (an older version).
	r.cl.Mu.Lock()
	for _, h := range r.cl.Hosts {
		for iid, in := range h.Instances {
			in.Activity = nil
			h.Instances[iid] = in
		}
	}
	r.cl.Mu.Unlock()
	r.clk.Advance(time.Hour)
	r.tick()
	r.wantCopies("llm", 1)
}

func TestOnDemandRestartNoSecondCopy(t *testing.T) {
	t.Run("cold", func(t *testing.T) {
		r, _ := onDemandRig(t, odIdle)
		r.restart()
		r.tick()
		if n := r.placeCalls(); n != 0 {
			t.Fatalf("%d places", n)
		}
	})
	t.Run("demanded", func(t *testing.T) {
		r, hs := onDemandRig(t, odIdle)
		r.demand(hs[0].ID)
		r.restart()
		r.tick()
		r.tick()
		if n := r.placeCalls(); n != 1 {
			t.Fatalf("%d places, want 1", n)
		}
		r.wantCopies("llm", 1)
	})
	t.Run("starting", func(t *testing.T) {
		r, hs := onDemandRig(t, odIdle)
		for _, h := range hs {
			r.cl.Set(h, func(h *planetest.Host) { h.Place = planetest.PlaceLostAfterActing })
		}
		r.demand(hs[0].ID)
		r.tick()
		if got := r.odState(); got != OnDemandStarting {
			t.Fatalf("state %s with the place unanswered, want starting", got)
		}
		r.restart()
		for _, h := range hs {
			r.cl.Set(h, func(h *planetest.Host) { h.Place = planetest.PlaceOK })
		}
		r.tick()
		r.tick()
		r.wantCopies("llm", 1)
		if n := r.placeCalls(); n != 1 {
			t.Fatalf("%d places, want 1", n)
		}
	})
	t.Run("idle", func(t *testing.T) {
		r, hs := onDemandRig(t, odIdle)
		readyChat(t, r, hs[0].ID)
		last := r.clk.Now()
		r.clk.Advance(30 * time.Second)
		r.tick()
		if got := r.odState(); got != OnDemandIdle {
			t.Fatalf("state %s, want idle", got)
		}
		r.restart()
		r.tick()
		r.tick()
		r.wantCopies("llm", 1)
		if n := r.placeCalls(); n != 1 {
			t.Fatalf("%d places, want 1", n)
		}
		// The restarted controller counts residency from when it saw the
		// instance run: it stays longer, never shorter, and then goes.
		r.setActivity("chat", 0, last)
		r.clk.Advance(odIdle.IdleAfter)
		r.tick()
		r.wantCopies("llm", 0)
	})
}

// A demand makes Run tick at once: with a tick of an hour on a clock that
// does not move, the place comes before any period has passed.
func TestOnDemandDemandWakesTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, hs := onDemandRig(t, odIdle)
		r.cfg.Tick, r.cfg.DeadAfter = time.Hour, 2*time.Hour
		r.restart()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.c.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		synctest.Wait()
		if n := r.placeCalls(); n != 0 {
			t.Fatalf("%d places before the demand", n)
		}
		start := time.Now()
		r.demand(hs[0].ID)
		synctest.Wait()
		if n := r.placeCalls(); n != 1 {
			t.Fatalf("%d places after the demand, want 1 at once", n)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("the place came after %s, want at once", waited)
		}
	})
}

// controller.workloads[].on_demand reaches the plane's workload, its
// demand_from resolved as the workload's nodes are; a workload that is
// not on demand has none; Validate refuses what the plane cannot use.
func TestOnDemandFromConfig(t *testing.T) {
	cfg := config.Default()
	cfg.Controller.Workloads = []config.Workload{
		{Name: "a", Package: "p"},
		{Name: "b", Package: "p", OnDemand: config.OnDemand{Enabled: true, IdleAfter: config.Duration{D: time.Minute},
			MinResidency: config.Duration{D: 10 * time.Second}, MaxWait: config.Duration{D: 20 * time.Second},
			DemandFrom: []string{"peer-c"}, EvictCost: 7}},
	}
	ref := func(r string) string { return "id-" + r }
	ws := ConfigOf(cfg, ref).Workloads
	if len(ws) != 2 || ws[0].OnDemand != nil || ws[1].OnDemand == nil {
		t.Fatalf("plane workloads %+v", ws)
	}
	want := OnDemand{IdleAfter: time.Minute, MinResidency: 10 * time.Second, MaxWait: 20 * time.Second, DemandFrom: []string{"id-peer-c"}, EvictCost: 7}
	if got := *ws[1].OnDemand; !reflect.DeepEqual(got, want) {
		t.Fatalf("on demand %+v, want %+v", got, want)
	}
	c := Default()
	c.Workloads = []Workload{{Name: "b", Package: "p", OnDemand: &OnDemand{MinResidency: time.Hour, IdleAfter: time.Minute, EvictCost: -1, DemandFrom: []string{""}}}}
	err := c.Validate()
	for _, s := range []string{"max_wait: must be positive", "min_residency: 1h0m0s is longer than idle_after", "evict_cost: must not be negative", "demand_from: \"\" is not a node id"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("Validate: %v, want %q", err, s)
		}
	}
}

// A demand no instance met within max_wait lapses (the workload is cold
// again, not started long after its requests gave up); a new demand ends
// the backoff of the failed attempts and is placed at once.
func TestOnDemandDemandLapsesAfterMaxWait(t *testing.T) {
	r, hs := onDemandRig(t, odIdle)
	r.cfg.RetryBackoff = 4 * time.Minute // longer than max_wait
	r.restart()
	for _, h := range hs {
		r.cl.Set(h, func(h *planetest.Host) { h.Place = planetest.PlaceRefuse })
	}
	r.demand(hs[0].ID)
	r.tick()
	if got := r.odState(); got != OnDemandStarting {
		t.Fatalf("state %s with every place refused, want starting", got)
	}
	r.clk.Advance(odIdle.MaxWait + time.Second)
	r.tick()
	if got := r.odState(); got != OnDemandCold {
		t.Fatalf("state %s past max_wait, want cold", got)
	}
	for _, h := range hs {
		r.cl.Set(h, func(h *planetest.Host) { h.Place = planetest.PlaceOK })
	}
	calls := r.placeCalls()
	r.clk.Advance(2 * MaxBackoff)
	r.tick()
	if n := r.placeCalls(); n != calls {
		t.Fatalf("%d places after the demand lapsed, want none", n-calls)
	}
	// Refused again, then demanded: the backoff does not hold it.
	for _, h := range hs {
		r.cl.Set(h, func(h *planetest.Host) { h.Place = planetest.PlaceRefuse })
	}
	r.demand(hs[0].ID)
	r.tick()
	for _, h := range hs {
		r.cl.Set(h, func(h *planetest.Host) { h.Place = planetest.PlaceOK })
	}
	r.demand(hs[0].ID) // held: changes nothing
	r.clk.Advance(time.Second)
	r.tick()
	if n := len(r.liveOf("chat")); n != 0 {
		t.Fatalf("%d instances inside the backoff of a held demand", n)
	}
	r.clk.Advance(odIdle.MaxWait)
	r.tick() // lapses, inside the backoff
	if got := r.odState(); got != OnDemandCold {
		t.Fatalf("state %s, want cold", got)
	}
	r.demand(hs[0].ID)
	r.tick()
	r.wantCopies("llm", 1)
}

// busyOnStatus is the cluster as a dispatcher whose status call (the
// controller's second look before an idle unload) finds a request in
// flight: one arrived after the tick's describe.
type busyOnStatus struct {
	*fakeCluster
	r *rig
}

func (b busyOnStatus) Status(ctx context.Context, node string) (ctl.StatusList, error) {
	b.r.setActivity("chat", 1, b.r.clk.Now())
	return b.fakeCluster.Status(ctx, node)
}

// A request that arrives between the describe and the unload keeps the
// instance: the node is asked again before it is unloaded.
func TestOnDemandIdleUnloadLooksAgain(t *testing.T) {
	r, hs := onDemandRig(t, odIdle)
	readyChat(t, r, hs[0].ID)
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: busyOnStatus{r.cl, r}, StatePath: r.state, Store: r.store})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	r.tick()
	r.setActivity("chat", 0, r.clk.Now())
	r.clk.Advance(time.Hour)
	r.tick()
	r.wantCopies("llm", 1)
	if got := testutil.ToFloat64(r.c.met.idleUnloads.WithLabelValues("chat")); got != 0 {
		t.Fatalf("idle unloads %v, want 0", got)
	}
}
