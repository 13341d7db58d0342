package plane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// TestRecentKeepsReportsOfEveryDecision: operator places, dry runs,
// unplaceable decisions and reschedules are all explained by Recent; a
// decision id it never made is not.
func TestRecentKeepsReportsOfEveryDecision(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	unplaceable := r.place(echo) // no tick yet: nobody alive
	r.tick()
	dry := echo
	dry.DryRun = true
	dryRep := r.place(dry)
	placed := r.place(echo)
	for name, rep := range map[string]Report{"unplaceable": unplaceable, "dry run": dryRep, "placed": placed} {
		got, ok := r.c.Recent(rep.DecisionID)
		if !ok {
			t.Fatalf("%s: Recent(%s) not found", name, rep.DecisionID)
		}
		if got.Explain() != rep.Explain() {
			t.Errorf("%s: explanation differs:\n%s\nwant\n%s", name, got.Explain(), rep.Explain())
		}
	}
	if ids := r.c.RecentIDs(); len(ids) != 3 {
		t.Errorf("RecentIDs = %v, want the 3 decisions", ids)
	}
	if _, ok := r.c.Recent(strings.Repeat("0", 64)); ok {
		t.Error("Recent found a decision that was never made")
	}
	// The placed instance's node dies: the reschedule's decision is
	// explained too.
	host := hs[0]
	if placed.Placed.Node == hs[1].ID {
		host = hs[1]
	}
	r.cl.Kill(host)
	r.clk.Advance(r.cfg.DeadAfter)
	r.tick()
	var moved *Placement
	for _, p := range r.c.Placements() {
		if p.Replaces == placed.DecisionID {
			moved = &p
		}
	}
	if moved == nil {
		t.Fatalf("not rescheduled: %+v", r.c.Placements())
	}
	rep, ok := r.c.Recent(moved.DecisionID)
	if !ok || rep.Placed == nil || rep.Placed.Node == host.ID {
		t.Fatalf("reschedule report %+v, %v", rep, ok)
	}
	if !strings.Contains(rep.Explain(), "decision_id: "+moved.DecisionID) {
		t.Errorf("reschedule explanation:\n%s", rep.Explain())
	}
}

// TestRecentIsBounded: the ring keeps the last MaxRecentReports reports
// and drops the oldest first; a report added again keeps its place.
func TestRecentIsBounded(t *testing.T) {
	var r recentReports
	id := func(i int) string { return fmt.Sprintf("%064x", i) }
	r.add(Report{}) // no decision: not kept
	for i := range MaxRecentReports + 10 {
		r.add(Report{DecisionID: id(i)})
		if i == 5 {
			r.add(Report{DecisionID: id(5), Unsettled: true}) // updated in place
		}
	}
	if len(r.byID) != MaxRecentReports || len(r.ids) != MaxRecentReports {
		t.Fatalf("kept %d reports in %d slots, want %d", len(r.byID), len(r.ids), MaxRecentReports)
	}
	for i := range 10 {
		if _, ok := r.get(id(i)); ok {
			t.Errorf("report %d of the first 10 still kept", i)
		}
	}
	for i := 10; i < MaxRecentReports+10; i++ {
		if _, ok := r.get(id(i)); !ok {
			t.Fatalf("report %d dropped", i)
		}
	}
	// Oldest first, across the ring's wrap (the fleet page lists them
	// newest first).
	ids := r.idList()
	for i, got := range ids {
		if want := id(i + 10); got != want {
			t.Fatalf("idList()[%d] = %s, want %s", i, got, want)
		}
	}
}

func TestNodeViews(t *testing.T) {
	r, hs := newRig(t, 8, 16)
	// Before any tick: no facts, no listing, not alive.
	for _, v := range r.c.NodeViews() {
		if v.HasFacts || v.Instances != -1 || v.Liveness == engine.Alive {
			t.Fatalf("before a tick: %+v", v)
		}
	}
	r.tick()
	rep := r.place(echo)
	if rep.Placed == nil {
		t.Fatalf("not placed:\n%s", rep.Explain())
	}
	r.clk.Advance(2 * time.Second)
	r.tick()
	got := map[string]NodeView{}
	for _, v := range r.c.NodeViews() {
		got[v.ID] = v
	}
	for _, h := range hs {
		v := got[h.ID]
		want := NodeView{
			ID: h.ID, Tier: engine.TrustPaired, Liveness: engine.Alive, LastContact: r.clk.Now(),
			HasFacts: true, MemFreeBytes: h.Facts.MemFreeBytes, MemTotalBytes: h.Facts.MemTotalBytes,
		}
		if h.ID == rep.Placed.Node {
			want.Instances, want.Placements = 1, 1
		}
		// Facts details are the fake host's; compare what the view adds.
		v.FactsSeq, v.FactsIssued, v.FactsExpire, v.FactsAge = 0, time.Time{}, time.Time{}, 0
		if diff := cmp.Diff(want, v); diff != "" {
			t.Errorf("view of %s (-want +got):\n%s", h.ID, diff)
		}
	}
}

// TestStartThroughController: an instance the operator stopped through
// the controller is not placed again when its node dies; one started
// again through the controller (Start) is running under its host's
// supervision as far as the lifecycle knows: it is watched, and moved
// when its node dies. The request and the transition are chained and
// persisted.
func TestStartThroughController(t *testing.T) {
	ctx := context.Background()
	for _, started := range []bool{false, true} {
		t.Run(fmt.Sprintf("started=%v", started), func(t *testing.T) {
			r, hs := newRig(t, 8, 8)
			r.tick()
			rep := r.place(echo)
			if rep.Placed == nil {
				t.Fatal("not placed")
			}
			h := hostOf(hs, rep.Placed.Node)
			if _, err := r.c.Stop(ctx, rep.DecisionID); err != nil {
				t.Fatal(err)
			}
			r.step()
			if started {
				p, err := r.c.Start(ctx, rep.Placed.InstanceID)
				if err != nil {
					t.Fatal(err)
				}
				if p.Stopped || p.HostState != ctl.StateRunning || !p.WasRunning {
					t.Fatalf("after start: %+v", p)
				}
				r.cl.Mu.Lock()
				state := h.Instances[rep.Placed.InstanceID].Lifecycle
				r.cl.Mu.Unlock()
				if state != ctl.StateRunning {
					t.Fatalf("the host has it %s", state)
				}
				if !chainHas(r.entries(KindInstance), `"verb":"start"`) || !chainHas(r.entries(KindLifecycle), "started by the operator") {
					t.Error("start not chained")
				}
				// Persisted: a restart still knows it runs.
				r.restart()
				r.step()
				if ps := r.c.Placements(); len(ps) != 1 || ps[0].Stopped || ps[0].HostState != ctl.StateRunning {
					t.Fatalf("after restart: %+v", ps)
				}
			}
			r.cl.Kill(h)
			r.clk.Advance(r.cfg.DeadAfter)
			for range 3 {
				r.step()
			}
			moved := r.liveCopies("echo") == 1
			if moved != started {
				t.Fatalf("started %v: moved %v (placements %+v)", started, moved, r.c.Placements())
			}
		})
	}
}

func TestStartRefusals(t *testing.T) {
	ctx := context.Background()
	r, hs := newRig(t, 8, 8)
	r.tick()
	rep := r.place(echo)
	if _, err := r.c.Start(ctx, "nope"); !errors.Is(err, ErrUnknownPlacement) {
		t.Errorf("unknown: %v", err)
	}
	// Its node dies and it moves: the old placement has no instance to
	// start.
	r.cl.Set(hostOf(hs, rep.Placed.Node), func(h *planetest.Host) { h.Down = true })
	r.clk.Advance(r.cfg.DeadAfter)
	r.step()
	if _, err := r.c.Start(ctx, rep.DecisionID); !errors.Is(err, ErrNotStartable) {
		t.Errorf("replaced: %v", err)
	}
	// A node demoted below the kind's min_tier does not start it again.
	var nu Placement
	for _, p := range r.c.Placements() {
		if p.Replaces == rep.DecisionID {
			nu = p
		}
	}
	ts := slices.Clone(r.targets)
	for i := range ts {
		if ts[i].ID == nu.Node {
			ts[i].Tier = engine.TrustDiscovered
		}
	}
	if err := r.c.SetTargets(ts); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Start(ctx, nu.DecisionID); !errors.Is(err, ErrNotStartable) || !strings.Contains(err.Error(), "below min_tier") {
		t.Errorf("demoted: %v", err)
	}
}

// The instance verbs take a unique decision id prefix of 8 characters or
// more, as explain does, and refuse one that names several placements
// rather than guess.
func TestDecisionPrefix(t *testing.T) {
	a := &Placement{DecisionID: "abcdef0123456789" + strings.Repeat("0", 48)}
	b := &Placement{DecisionID: "abcdef0199999999" + strings.Repeat("1", 48)}
	ps := map[string]*Placement{a.DecisionID: a, b.DecisionID: b}
	for _, tc := range []struct {
		ref  string
		want *Placement
		err  error
	}{
		{"abcdef0123", a, nil},
		{"abcdef0199", b, nil},
		{"abcdef01", nil, ErrAmbiguousPlacement},
		{"abcdef0", nil, ErrUnknownPlacement},               // too short
		{"ABCDEF0123", nil, ErrUnknownPlacement},            // not lower-case hex
		{"abcdef01x3", nil, ErrUnknownPlacement},            // not hex
		{"ffffffff", nil, ErrUnknownPlacement},              // no match
		{a.DecisionID[:63] + "x", nil, ErrUnknownPlacement}, // 64 characters: a whole id or nothing
	} {
		got, err := byDecisionPrefix(ps, tc.ref)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("byDecisionPrefix(%q) = %v, %v; want %v, %v", tc.ref, got, err, tc.want, tc.err)
		}
	}
}

// Start, stop and unload through the controller resolve a decision id
// prefix to its placement.
func TestVerbsTakeDecisionPrefix(t *testing.T) {
	ctx := context.Background()
	r, _ := newRig(t, 8, 8)
	r.tick()
	rep := r.place(echo)
	p, err := r.c.Stop(ctx, rep.DecisionID[:16])
	if err != nil {
		t.Fatal(err)
	}
	if p.DecisionID != rep.DecisionID || !p.Stopped {
		t.Fatalf("stop by prefix: %+v", p)
	}
	r.step()
	if p, err = r.c.Start(ctx, rep.DecisionID[:8]); err != nil {
		t.Fatal(err)
	}
	if p.DecisionID != rep.DecisionID || p.Stopped {
		t.Fatalf("start by prefix: %+v", p)
	}
}
