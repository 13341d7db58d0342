package plane

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// fakeLead is a Leadership the test sets: role, term, leader; Barrier
// counts its calls.
type fakeLead struct {
	mu       sync.Mutex // guards the fields below
	info     LeaderInfo
	barriers int
	applied  uint64
	changed  chan struct{}
}

func newFakeLead() *fakeLead {
	return &fakeLead{info: LeaderInfo{Role: RoleFollower, Term: 1, Leader: "n-other"}, changed: make(chan struct{}, 1)}
}

func (f *fakeLead) Leader() LeaderInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.info
}

func (f *fakeLead) Changed() <-chan struct{} { return f.changed }

func (f *fakeLead) Barrier(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.info.Role != RoleLeader {
		return &NotLeaderError{Leader: f.info.Leader}
	}
	f.barriers++
	return nil
}

func (f *fakeLead) Applied() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

func (f *fakeLead) set(info LeaderInfo) {
	f.mu.Lock()
	f.info = info
	f.applied++
	f.mu.Unlock()
}

// A controller with a Leadership: as a follower its Tick describes
// nothing and its writes fail naming the leader; on gaining the lead it
// waits for the Barrier and rebuilds from the store (a decision being
// dispatched there is unsettled), then places; on losing it, it stops
// at once: the next Tick calls no node.
func TestLeadershipGainAndLoss(t *testing.T) {
	m := newMemStore()
	r := deltaRig(t, m)
	r.tick()
	placed := r.place(Order{Name: "a", PackageDir: "/pkg/echo", Start: true})
	// What another leader saved: a decision it was dispatching.
	r.c.mu.Lock()
	pl := r.c.placements[placed.DecisionID]
	pl.Life, pl.Candidates, pl.Cursor = LifeDispatching, []Candidate{{Node: pl.Node, Variant: pl.Variant}}, 0
	r.c.mu.Unlock()
	if err := r.c.w.persist(); err != nil {
		t.Fatal(err)
	}

	lead := newFakeLead()
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: r.cl, State: m, Leadership: lead})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := func() int {
		r.cl.Mu.Lock()
		defer r.cl.Mu.Unlock()
		return len(r.cl.Calls)
	}
	before := calls()
	if err := c.Tick(ctx); err != nil || calls() != before || c.Leadership().Leads || c.Term() != 0 {
		t.Fatalf("follower tick: %v, leads %v, term %d", err, c.Leadership().Leads, c.Term())
	}
	var nl *NotLeaderError
	if _, err := c.Place(ctx, Order{Name: "b", PackageDir: "/pkg/echo"}); !errors.As(err, &nl) || nl.Leader != "n-other" {
		t.Fatalf("follower place: %v", err)
	}
	for _, n := range c.Nodes() {
		if n.FactsSeq != 0 {
			t.Fatalf("a follower described %s", n.ID)
		}
	}

	lead.set(LeaderInfo{Role: RoleLeader, Term: 7, Leader: "n-self"})
	if err := c.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.Leadership().Leads || c.Term() != 7 || lead.barriers != 1 {
		t.Fatalf("after the gain: leads %v, term %d, %d barriers", c.Leadership().Leads, c.Term(), lead.barriers)
	}
	ps := c.Placements()
	if len(ps) != 1 || ps[0].DecisionID != placed.DecisionID || ps[0].Life == LifeDispatching {
		t.Fatalf("rebuilt state %+v: want the placement, settled by the first tick", ps)
	}
	if _, err := c.Place(ctx, Order{Name: "b", PackageDir: "/pkg/echo", Start: true}); err != nil {
		t.Fatalf("leader place: %v", err)
	}

	lead.set(LeaderInfo{Role: RoleFollower, Term: 8, Leader: "n-new"})
	before = calls()
	if err := c.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Leadership().Leads || c.Term() != 0 || calls() != before {
		t.Fatalf("after the loss: leads %v, term %d, %d calls", c.Leadership().Leads, c.Term(), calls()-before)
	}
	if _, err := c.Place(ctx, Order{Name: "c", PackageDir: "/pkg/echo"}); !errors.As(err, &nl) || nl.Leader != "n-new" {
		t.Fatalf("deposed place: %v", err)
	}
}
