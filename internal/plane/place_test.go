package plane

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// rankOrder returns the ranked candidates of a dry run.
// firstOfTwo is the one of two hosts ranked first for echo, with the
// rank order.
func (r *rig) firstOfTwo(hs []*planetest.Host) (*planetest.Host, []string) {
	r.t.Helper()
	order := r.rankOrder()
	first := hs[0]
	if hs[1].ID == order[0] {
		first = hs[1]
	}
	return first, order
}

func (r *rig) rankOrder() []string {
	r.t.Helper()
	o := echo
	o.DryRun = true
	rep := r.place(o)
	var out []string
	for _, c := range rep.Decision.Candidates {
		if c.Eligible() {
			out = append(out, c.Node)
		}
	}
	return out
}

func outcomes(as []Attempt) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Node+" "+a.Outcome)
	}
	return out
}

func TestPlaceGoesToBestNode(t *testing.T) {
	r, hs := newRig(t, 8, 16, 0)
	r.tick()
	rep := r.place(echo)
	if rep.Decision.Chosen == nil || rep.Placed == nil {
		t.Fatalf("not placed:\n%s", rep.Decision.Explain())
	}
	if rep.Placed.Node != rep.Decision.Chosen.Node {
		t.Errorf("placed on %s, engine chose %s", rep.Placed.Node, rep.Decision.Chosen.Node)
	}
	if rep.Placed.Node == hs[2].ID {
		t.Errorf("placed on the node without free memory")
	}
	r.wantCopies("echo", 1)
	// The decision id is the chain hash of the decision entry.
	ds := r.entries(KindDecision)
	if len(ds) != 1 || ds[0].Hash != rep.DecisionID || rep.Placed.DecisionID != rep.DecisionID {
		t.Errorf("decision id %s, chained decisions %d", rep.DecisionID, len(ds))
	}
	if len(r.entries(KindPlaced)) != 1 {
		t.Errorf("placement not chained")
	}
	// Persisted, 0600.
	fi, err := os.Stat(r.state)
	if err != nil || fi.Mode().Perm() != StateFileMode {
		t.Fatalf("state file: %v mode %v", err, fi.Mode())
	}
}

func TestDryRunAndUnplaceableAreChained(t *testing.T) {
	r, _ := newRig(t, 8)
	// Before any tick no node is alive: unplaceable, still chained.
	rep := r.place(echo)
	if rep.Decision.Chosen != nil || rep.Placed != nil || rep.DecisionID == "" {
		t.Fatalf("placed with no live node: %+v", rep)
	}
	r.tick()
	o := echo
	o.DryRun = true
	rep = r.place(o)
	if rep.Decision.Chosen == nil || rep.Placed != nil {
		t.Fatalf("dry run: chosen %v placed %v", rep.Decision.Chosen, rep.Placed)
	}
	if n := len(r.entries(KindDecision)); n != 2 {
		t.Errorf("%d decisions chained, want 2", n)
	}
	r.wantCopies("echo", 0)
}

func TestRefusedAndUnreachableFallThrough(t *testing.T) {
	r, hs := newRig(t, 8, 8, 8)
	r.tick()
	order := r.rankOrder()
	byID := map[string]*planetest.Host{}
	for _, h := range hs {
		byID[h.ID] = h
	}
	r.cl.Set(byID[order[0]], func(h *planetest.Host) { h.Place = planetest.PlaceRefuse })
	r.cl.Kill(byID[order[1]])
	rep := r.place(echo)
	want := []string{order[0] + " refused", order[1] + " unreachable", order[2] + " placed"}
	if d := cmp.Diff(want, outcomes(rep.Attempts)); d != "" {
		t.Errorf("attempts (-want +got):\n%s", d)
	}
	if rep.Placed == nil || rep.Placed.Node != order[2] {
		t.Fatalf("placed %+v", rep.Placed)
	}
	r.wantCopies("echo", 1)
	if n := len(r.entries(KindDispatch)); n != 2 {
		t.Errorf("%d dispatch failures chained, want 2", n)
	}
	ex := rep.Explain()
	for _, w := range []string{"decision_id: " + rep.DecisionID, "1. " + order[0] + " via cpu: refused (admission: ", "3. " + order[2] + " via cpu: placed"} {
		if !strings.Contains(ex, w) {
			t.Errorf("explanation lacks %q:\n%s", w, ex)
		}
	}
}

func TestEveryCandidateRefuses(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	r.tick()
	for _, h := range hs {
		r.cl.Set(h, func(h *planetest.Host) { h.Place = planetest.PlaceRefuse })
	}
	rep := r.place(echo)
	if rep.Placed != nil || len(rep.Attempts) != 2 || len(r.c.Placements()) != 0 {
		t.Fatalf("report %+v, placements %d", rep, len(r.c.Placements()))
	}
}

func TestIndeterminateReconciles(t *testing.T) {
	tests := []struct {
		name      string
		mode      planetest.PlaceMode
		statusErr bool
		want      []string // attempt outcomes by rank index
		placedAt  int      // rank index, -1 none
		unsettled bool
	}{
		{name: "found is adopted", mode: planetest.PlaceLostAfterActing, want: []string{"0 indeterminate"}, placedAt: 0},
		{name: "not found goes to the next", mode: planetest.PlaceLostNoAct, want: []string{"0 indeterminate", "1 placed"}, placedAt: 1},
		{name: "in flight stops", mode: planetest.PlaceInFlight, want: []string{"0 indeterminate"}, placedAt: -1, unsettled: true},
		{name: "status unreachable stops", mode: planetest.PlaceLostAfterActing, statusErr: true, want: []string{"0 indeterminate"}, placedAt: -1, unsettled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, hs := newRig(t, 8, 8)
			r.tick()
			first, order := r.firstOfTwo(hs)
			idx := map[string]string{order[0]: "0", order[1]: "1"}
			r.cl.Set(first, func(h *planetest.Host) { h.Place = tt.mode; h.StatusErr = tt.statusErr })
			rep := r.place(echo)
			var got []string
			for _, a := range rep.Attempts {
				got = append(got, idx[a.Node]+" "+a.Outcome)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("attempts (-want +got):\n%s", d)
			}
			if rep.Unsettled != tt.unsettled {
				t.Errorf("unsettled = %v, want %v", rep.Unsettled, tt.unsettled)
			}
			if tt.placedAt >= 0 {
				if rep.Placed == nil || rep.Placed.Node != order[tt.placedAt] {
					t.Fatalf("placed %+v, want on %s", rep.Placed, order[tt.placedAt])
				}
			} else if rep.Placed != nil {
				t.Fatalf("placed %+v while unsettled", rep.Placed)
			}
			n, _ := r.cl.Copies("echo")
			if n > 1 {
				t.Fatalf("%d copies", n)
			}
			if !tt.unsettled {
				return
			}
			// Nothing else is sent while unsettled.
			calls := len(r.cl.Calls)
			r.clk.Advance(r.cfg.Tick)
			r.tick()
			if len(r.cl.Calls) != calls {
				t.Errorf("calls while unsettled: %v", r.cl.Calls[calls:])
			}
			// The node settles: the in-flight decision placed, or status
			// answers again. The next tick adopts it.
			r.cl.Set(first, func(h *planetest.Host) {
				h.StatusErr = false
				if len(h.InFlight) > 0 {
					h.InFlight = nil
					h.Place = planetest.PlaceOK
				}
			})
			if tt.mode == planetest.PlaceInFlight {
				// The host finished the place after all.
				r.cl.Mu.Lock()
				p := r.cl.Pkgs["/pkg/echo"]
				r.cl.Mu.Unlock()
				pl := r.c.Placements()[0]
				if _, err := r.cl.PlaceDecided(context.Background(), first.ID, fakePkg{p}, pl.Variant, pl.Order.Config, true, pl.DecisionID); err != nil {
					t.Fatal(err)
				}
			}
			r.clk.Advance(r.cfg.Tick)
			r.tick()
			ps := r.c.Placements()
			if len(ps) != 1 || ps[0].Life != LifePlaced || ps[0].Node != first.ID {
				t.Fatalf("after settling: %+v", ps)
			}
			r.wantCopies("echo", 1)
			if len(r.entries(KindAdopted)) != 1 {
				t.Errorf("adoption not chained")
			}
		})
	}
}

func TestUnsettledNotFoundResumesNextCandidate(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	r.tick()
	first, order := r.firstOfTwo(hs)
	r.cl.Set(first, func(h *planetest.Host) { h.Place = planetest.PlaceLostNoAct; h.StatusErr = true })
	if rep := r.place(echo); !rep.Unsettled {
		t.Fatalf("not unsettled: %+v", rep)
	}
	r.cl.Set(first, func(h *planetest.Host) { h.StatusErr = false })
	r.clk.Advance(r.cfg.Tick)
	r.tick()
	ps := r.c.Placements()
	if len(ps) != 1 || ps[0].Life != LifePlaced || ps[0].Node != order[1] {
		t.Fatalf("after settling: %+v", ps)
	}
	r.wantCopies("echo", 1)
}

func TestGovernanceDefaultDeny(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	r.cl.AddPackage("/pkg/chat", "chat", pkg.KindInference, 1)
	r.tick()
	rep := r.place(Order{PackageDir: "/pkg/chat", Start: true})
	if rep.Decision.Chosen != nil || rep.Placed != nil {
		t.Fatalf("a kind outside the policy was placed")
	}
	for _, c := range rep.Decision.Candidates {
		if len(c.Rejections) == 0 || c.Rejections[len(c.Rejections)-1].Code != engine.CodeGate {
			t.Errorf("%s: rejections %v, want gate", c.Node, c.Rejections)
		}
	}
	// MinTier is the trust floor.
	r.cfg.Policy.Kinds[pkg.KindService] = KindRule{MinTier: engine.TrustPinned}
	r.restart()
	r.tick()
	rep = r.place(echo)
	if rep.Decision.Chosen != nil {
		t.Fatalf("placed below the kind's min tier")
	}
	if c := rep.Decision.Candidates[0]; c.Rejections[0].Code != engine.CodeTrust {
		t.Errorf("rejections %v, want trust", c.Rejections)
	}
	// deny_nodes
	r.cfg.Policy.Kinds[pkg.KindService] = KindRule{MinTier: engine.TrustPaired}
	r.cfg.Policy.DenyNodes = []string{r.targets[0].ID, r.targets[1].ID}
	r.restart()
	r.tick()
	if rep = r.place(echo); rep.Decision.Chosen != nil {
		t.Fatalf("placed on a denied node")
	}
	r.wantCopies("echo", 0)
}

func TestCrashOnThePlacePathNeverTwoCopies(t *testing.T) {
	tests := []struct {
		name string
		mode planetest.PlaceMode // what the first candidate did when the crash came
	}{
		{"before the place reached the node", planetest.PlaceLostNoAct},
		{"after the node placed, before the answer", planetest.PlaceLostAfterActing},
		{"after the answer", planetest.PlaceOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, hs := newRig(t, 8, 8)
			r.tick()
			first, _ := r.firstOfTwo(hs)
			// The state file as the crash left it: captured when the place
			// call is made (decision persisted, first candidate named).
			r.cl.Set(first, func(h *planetest.Host) { h.Place = tt.mode })
			var atCall []byte
			c := r.capturingController(t, &atCall)
			c.Tick(context.Background())
			rep, err := c.Place(context.Background(), echo)
			if err != nil {
				t.Fatal(err)
			}
			// The decision and its candidates were on disk before the place.
			st, err := decodeState(atCall)
			if err != nil || len(st.Placements) != 1 || st.Placements[0].DecisionID != rep.DecisionID ||
				len(st.Placements[0].Candidates) == 0 || st.Placements[0].Life != LifeDispatching {
				t.Fatalf("state at the place call (%v):\n%s", err, atCall)
			}
			if tt.mode != planetest.PlaceOK {
				// Crash during the call: the file holds what it held then.
				if err := os.WriteFile(r.state, atCall, StateFileMode); err != nil {
					t.Fatal(err)
				}
			}
			r.cl.Set(first, func(h *planetest.Host) { h.Place = planetest.PlaceOK })
			r.restart()
			for range 3 {
				r.clk.Advance(r.cfg.Tick)
				r.tick()
			}
			r.wantCopies("echo", 1)
			ps := r.c.Placements()
			if len(ps) != 1 || ps[0].Life != LifePlaced {
				t.Fatalf("placements after restart: %+v", ps)
			}
		})
	}
}

// capturingController is a controller on r's state file whose place
// calls first read that file into *atCall: the file a crash during the
// call would leave.
func (r *rig) capturingController(t *testing.T, atCall *[]byte) *Controller {
	t.Helper()
	hook := &hookDispatcher{fakeCluster: r.cl, before: func() {
		b, err := os.ReadFile(r.state)
		if err != nil {
			t.Error(err)
		}
		*atCall = b
	}}
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: hook, StatePath: r.state})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// hookDispatcher runs before ahead of every place.
type hookDispatcher struct {
	*fakeCluster
	before func()
}

func (h *hookDispatcher) PlaceDecided(ctx context.Context, node string, p Package, variant string, cfg ctl.InstanceConfig, start bool, decisionID string) (ctl.PlaceResult, error) {
	h.before()
	return h.fakeCluster.PlaceDecided(ctx, node, p, variant, cfg, start, decisionID)
}

func TestMalformedStateRefusedAndUntouched(t *testing.T) {
	r, _ := newRig(t, 8)
	for _, bad := range [][]byte{
		[]byte("{not json"),
		[]byte(`{"version":3,"placements":[]}`),
		[]byte(`{"version":2,"packages":[],"placements":[{"decision_id":"` + string(make64('a')) + `","package":0,"node":"n","life":"placed"}]}`),
		[]byte(`{"version":2,"packages":[],"placements":[],"extra":1}`),
		[]byte(`{"version":1,"placements":[],"extra":1}`),
		[]byte(`{"version":1,"placements":[{"decision_id":"x"}]}`),
		// Trailing data, a stray closing bracket included.
		[]byte(`{"version":2,"packages":[],"placements":[]}}`),
		[]byte(`{"version":2,"packages":[],"placements":[]}]`),
		[]byte(`{"version":1,"placements":[]} {}`),
	} {
		if err := os.WriteFile(r.state, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: r.cl, StatePath: r.state})
		if !errors.Is(err, ErrBadState) {
			t.Errorf("New with %q: %v, want ErrBadState", bad, err)
		}
		got, _ := os.ReadFile(r.state)
		if !bytes.Equal(got, bad) {
			t.Errorf("state file changed: %q", got)
		}
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	r.tick()
	rep := r.place(echo)
	r.restart()
	ps := r.c.Placements()
	if len(ps) != 1 || ps[0].DecisionID != rep.DecisionID || ps[0].Order == nil || ps[0].Life != LifePlaced {
		t.Fatalf("restored %+v", ps)
	}
}

func TestMetrics(t *testing.T) {
	r, _ := newRig(t, 8)
	reg := prometheus.NewRegistry()
	if _, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: r.cl, StatePath: r.state, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: r.cl, StatePath: r.state, Registerer: reg}); err == nil {
		t.Fatal("second registration on one registry: no error")
	}
	reg = prometheus.NewRegistry()
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: r.cl, StatePath: r.state, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(context.Background())
	if _, err := c.Place(context.Background(), echo); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(c.met.placements.WithLabelValues(outPlaced)); got != 1 {
		t.Errorf("placements placed = %v", got)
	}
	if got := testutil.ToFloat64(c.met.dispatches.WithLabelValues(outPlaced)); got != 1 {
		t.Errorf("dispatch placed = %v", got)
	}
	if got := testutil.ToFloat64(c.met.nodes.WithLabelValues("alive")); got != 1 {
		t.Errorf("alive nodes = %v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "nodeld_plane_tick_duration_seconds"); err != nil || n != 1 {
		t.Errorf("tick histogram: %d, %v", n, err)
	}
}

// TestPlacedMemoryPendingUntilFacts: an instance placed after a node's
// facts were issued holds its memory there until newer facts arrive.
func TestPlacedMemoryPendingUntilFacts(t *testing.T) {
	r, hs := newRig(t, 1, 1)
	r.cl.Set(hs[0], func(h *planetest.Host) { h.Facts.MemFreeBytes = 3 << 29 }) // 1.5 GiB
	r.cl.Set(hs[1], func(h *planetest.Host) { h.Facts.MemFreeBytes = 3 << 29 })
	r.tick()
	r.clk.Advance(time.Second)
	a := r.place(echo)
	b := r.place(Order{PackageDir: "/pkg/echo", Start: true, Name: "echo-2"})
	if a.Placed == nil || b.Placed == nil || a.Placed.Node == b.Placed.Node {
		t.Fatalf("two 1 GiB instances on 1.5 GiB nodes: %+v / %+v", a.Placed, b.Placed)
	}
	c := r.place(Order{PackageDir: "/pkg/echo", Start: true, Name: "echo-3"})
	if c.Placed != nil {
		t.Fatalf("a third placed on %s: memory over-committed", c.Placed.Node)
	}
}
