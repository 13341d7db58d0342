package plane

import (
	"context"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
)

// heldDescribes is the fake cluster with the describes of one node held
// once armed: the listing is taken, then the describe waits for release,
// as a describe whose answer is on its way while the operator acts.
type heldDescribes struct {
	*fakeCluster
	node      string
	armed     bool
	described chan struct{}
	release   chan struct{}
}

func (h *heldDescribes) Describe(ctx context.Context, node string) (Description, error) {
	d, err := h.fakeCluster.Describe(ctx, node)
	if h.armed && node == h.node {
		h.described <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
		}
	}
	return d, err
}

// TestStopDuringTickStays: a tick whose listing of a node was taken before
// the operator stopped an instance there does not undo the stop (the
// stale listing showed it running: "started again"); the next tick,
// which lists the node anew, sees it stopped.
func TestStopDuringTickStays(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	r.cfg.DescribeTimeout = time.Minute
	r.restart()
	r.tick()
	rep := r.place(echo)
	if rep.Placed == nil {
		t.Fatalf("not placed: %+v", rep)
	}
	c, disp := heldController(t, r, rep.Placed.Node)
	iid := rep.Placed.InstanceID
	want := func(when string, stopped bool, state string) {
		t.Helper()
		ps := c.Placements()
		if len(ps) != 1 || ps[0].Stopped != stopped || ps[0].HostState != state {
			t.Fatalf("%s: %+v, want stopped %v and host state %s", when, ps, stopped, state)
		}
	}
	want("before the stop", false, ctl.StateRunning)

	tickAround(t, c, disp, func() {
		if _, err := c.Stop(context.Background(), iid); err != nil {
			t.Fatal(err)
		}
	})
	want("after the tick that listed the node before the stop", true, ctl.StateStopped)

	disp.armed = false
	if err := c.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	want("after the next tick", true, ctl.StateStopped)
}

// TestPlaceDuringTickStays: a tick whose listing of a node was taken
// before a Place put an instance there leaves the new placement alone.
// Judged by that listing, the instance was missing though its node is
// up: the tick marked it lost and placed it again under a new decision,
// forgetting the decision the Place had acknowledged
// (TestAcknowledgedPlacesSurviveFiftyKills in ctlraft failed so, about
// one full run in six). The next tick lists the node anew and keeps it.
func TestPlaceDuringTickStays(t *testing.T) {
	r, _ := newRig(t, 8)
	r.cfg.DescribeTimeout = time.Minute
	r.restart()
	r.tick()
	c, disp := heldController(t, r, r.targets[0].ID)

	var rep Report
	tickAround(t, c, disp, func() {
		var err error
		if rep, err = c.Place(context.Background(), echo); err != nil || rep.Placed == nil {
			t.Fatalf("place: %+v, %v", rep, err)
		}
	})
	want := func(when string) {
		t.Helper()
		ps := c.Placements()
		if len(ps) != 1 || ps[0].DecisionID != rep.DecisionID || ps[0].Life != LifePlaced {
			t.Fatalf("%s: %+v, want decision %s placed alone", when, ps, rep.DecisionID)
		}
	}
	want("after the tick that listed the node before the place")

	disp.armed = false
	if err := c.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	want("after the next tick")
	r.wantCopies("echo", 1)
}

// tickAround runs a tick whose describe of disp's node is held (disp
// armed), runs during while it is held, then lets the tick finish.
func tickAround(t *testing.T, c *Controller, disp *heldDescribes, during func()) {
	t.Helper()
	disp.armed = true
	ticked := make(chan error, 1)
	go func() { ticked <- c.Tick(context.Background()) }()
	select {
	case <-disp.described:
	case <-time.After(time.Minute):
		t.Fatal("the tick did not describe the node")
	}
	during()
	close(disp.release)
	select {
	case err := <-ticked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the tick did not return")
	}
}

// heldController is a controller on r's state whose describes of node
// can be held (heldDescribes, not armed yet), after one tick.
func heldController(t *testing.T, r *rig, node string) (*Controller, *heldDescribes) {
	t.Helper()
	disp := &heldDescribes{fakeCluster: r.cl, node: node,
		described: make(chan struct{}), release: make(chan struct{})}
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: disp, StatePath: r.state})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, disp
}
