package plane

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane/planetest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// swapRig is a controller on one 8 GiB node (its own) with on-demand
// workloads a and b (roles a and b) of 6 GiB each: room for one.
func swapRig(t *testing.T) (*rig, *planetest.Host) {
	t.Helper()
	r, hs := newRig(t, 8)
	r.cfg.Policy.Kinds[pkg.KindInference] = KindRule{MinTier: engine.TrustPaired}
	r.targets[0].Self = true
	var ws []Workload
	for _, name := range []string{"a", "b"} {
		r.addVersion("llm"+name, "1.0.0", 6, func(m *pkg.Manifest) { m.Kind, m.Role = pkg.KindInference, name })
		od := odIdle
		od.IdleAfter, od.MaxWait = 10*time.Minute, 2*time.Minute
		ws = append(ws, Workload{Name: name, Package: "llm" + name, OnDemand: &od})
	}
	r.declare(false, ws...)
	r.tick()
	return r, hs[0]
}

// tickHost ticks with the node's free memory what its instances leave
// (6 GiB each), as a real host reports it.
func (r *rig) tickHost(h *planetest.Host) {
	r.t.Helper()
	r.cl.Set(h, func(h *planetest.Host) { h.Facts.MemFreeBytes = (8 - 6*uint64(len(h.Instances))) << 30 })
	r.tick()
}

// byRule is an eviction choice for the tests: every idle on-demand
// instance past its min_residency, on its node.
func byRule(in swapInput) (swapChoice, bool) {
	var ch swapChoice
	for _, res := range in.Residents {
		if res.OnDemand && res.InFlight == 0 && !res.ReadySince.IsZero() && in.Now.Sub(res.ReadySince) >= res.MinResidency {
			ch.Node = res.Node
			ch.Evict = append(ch.Evict, res.DecisionID)
		}
	}
	return ch, len(ch.Evict) > 0
}

func setChooser(t *testing.T, f func(swapInput) (swapChoice, bool)) {
	old := chooseEvictions
	chooseEvictions = f
	t.Cleanup(func() { chooseEvictions = old })
}

func TestSwapEvictsIdleOnDemandForDemanded(t *testing.T) {
	r, h := swapRig(t)
	setChooser(t, byRule)
	r.demandRole("a", h.ID)
	for range 3 {
		r.tickHost(h)
	}
	r.setActivity("a", 0, r.clk.Now())
	r.tickHost(h)
	r.wantCopies("llma", 1)
	r.demandRole("b", h.ID)
	// Inside a's min_residency: nothing evicted, b waits.
	r.tickHost(h)
	r.wantCopies("llma", 1)
	r.wantCopies("llmb", 0)
	// Past it and idle: a is evicted, then b placed.
	r.clk.Advance(odIdle.MinResidency)
	r.tickHost(h)
	r.wantCopies("llma", 0)
	if got := testutil.ToFloat64(r.c.met.evictions.WithLabelValues("a")); got != 1 {
		t.Fatalf("evictions of a %v, want 1", got)
	}
	r.tickHost(h)
	r.wantCopies("llmb", 1)
	found := false
	for _, e := range r.entries(KindLifecycle) {
		var rec lifecycleRecord
		if err := json.Unmarshal(e.Payload, &rec); err != nil {
			t.Fatal(err)
		}
		found = found || (rec.Workload == "a" && rec.Reason == "evicted for b")
	}
	if !found {
		t.Fatal("the eviction is not chained as evicted for b")
	}
	var dec decisionRecord
	for _, e := range r.entries(KindDecision) {
		if err := json.Unmarshal(e.Payload, &dec); err != nil {
			t.Fatal(err)
		}
	}
	if dec.Declared != "b" || !strings.Contains(strings.Join(dec.Notes, "\n"), "evicted on "+h.ID+" to make room: a") {
		t.Fatalf("b's decision does not name what was evicted: %+v", dec)
	}
	for _, d := range r.c.Declarations() {
		want := map[string]string{"a": OnDemandCold, "b": OnDemandStarting}[d.Name]
		if d.OnDemand != want {
			t.Fatalf("%s is %s, want %s", d.Name, d.OnDemand, want)
		}
	}
}

// A choice that names an instance serving a request is refused by the
// writer: nothing is unloaded.
func TestSwapNeverEvictsInFlight(t *testing.T) {
	r, h := swapRig(t)
	setChooser(t, func(in swapInput) (swapChoice, bool) {
		var ch swapChoice
		for _, res := range in.Residents {
			ch.Node, ch.Evict = res.Node, append(ch.Evict, res.DecisionID)
		}
		return ch, len(ch.Evict) > 0
	})
	if _, err := r.c.Demand(t.Context(), "a", h.ID); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.tickHost(h)
	}
	r.setActivity("a", 1, r.clk.Now().Add(-time.Hour))
	r.clk.Advance(time.Hour)
	if _, err := r.c.Demand(t.Context(), "b", h.ID); err != nil {
		t.Fatal(err)
	}
	r.cl.Set(h, func(h *planetest.Host) { h.Facts.MemFreeBytes = 2 << 30 })
	if err := r.c.Tick(t.Context()); err == nil || !strings.Contains(err.Error(), "serving requests") {
		t.Fatalf("tick: %v, want the eviction refused", err)
	}
	r.wantCopies("llma", 1)
	r.wantCopies("llmb", 0)
}

// The swap with the engine's own choice (engineEvictions, the default):
// an idle a past its min_residency is evicted for a demanded b on a node
// with room for one, and b's decision names it; never inside a's
// min_residency.
func TestSwapByEngineEvict(t *testing.T) {
	r, h := swapRig(t)
	r.demandRole("a", h.ID)
	for range 3 {
		r.tickHost(h)
	}
	r.setActivity("a", 0, r.clk.Now())
	r.tickHost(h)
	r.wantCopies("llma", 1)
	r.demandRole("b", h.ID)
	r.tickHost(h)
	r.wantCopies("llma", 1)
	r.wantCopies("llmb", 0)
	r.clk.Advance(odIdle.MinResidency)
	r.tickHost(h)
	r.wantCopies("llma", 0)
	r.tickHost(h)
	r.wantCopies("llmb", 1)
	var dec decisionRecord
	for _, e := range r.entries(KindDecision) {
		if err := json.Unmarshal(e.Payload, &dec); err != nil {
			t.Fatal(err)
		}
	}
	notes := strings.Join(dec.Notes, "\n")
	if dec.Declared != "b" || !strings.Contains(notes, "evicted on "+h.ID+" to make room: a") {
		t.Fatalf("b's decision does not name what was evicted:\n%s", notes)
	}
}

// A swap that waits on the grace of a recently used instance tries the
// demanded workload again when the grace lapses, not after its doubling
// backoff (retry_backoff, 10 s here): the demand would otherwise wait
// past the moment room can be made.
func TestSwapRetriesWhenTheGraceLapses(t *testing.T) {
	r, h := swapRig(t)
	r.demandRole("a", h.ID)
	for range 3 {
		r.tickHost(h)
	}
	r.wantCopies("llma", 1)
	r.clk.Advance(odIdle.MinResidency)
	last := r.clk.Now()
	r.setActivity("a", 0, last) // a just served a request: inside the grace
	r.demandRole("b", h.ID)
	r.tickHost(h)
	r.wantCopies("llma", 1)
	r.wantCopies("llmb", 0)
	r.c.mu.Lock()
	next := r.c.decls["b"].NextAttempt
	r.c.mu.Unlock()
	if lapse := last.Add(r.c.conf().SwapGrace); next.IsZero() || next.After(lapse) {
		t.Fatalf("b's next attempt %s, want at the grace's lapse %s (retry_backoff is %s)", next, lapse, r.c.conf().RetryBackoff)
	}
	r.clk.Advance(r.c.conf().SwapGrace)
	r.tickHost(h)
	r.wantCopies("llma", 0)
	r.tickHost(h)
	r.wantCopies("llmb", 1)
}
