package plane

import (
	"context"
	"errors"
	"testing"

	"github.com/nodeld/nodeld/internal/ctl"
)

// staleDispatcher refuses every place with stale_term, as a host that saw
// a newer leader does, and counts the places sent.
type staleDispatcher struct {
	*fakeCluster
	places int
}

func (s *staleDispatcher) PlaceDecided(context.Context, string, Package, string, ctl.InstanceConfig, bool, string) (ctl.PlaceResult, error) {
	s.places++
	return ctl.PlaceResult{}, &ctl.CallError{Class: ctl.ClassRefused, Method: ctl.MethodPlace,
		Refusal: &ctl.Refusal{Code: ctl.CodeStaleTerm, Reason: "term 3 is below 4"}}
}

// TestStaleTermStopsTheDispatch: a place refused stale_term (this
// controller was deposed) is not tried on the next candidate, which
// would be a second copy beside the new leader's; it stays unsettled for
// whoever leads, and Place reports the refusal.
func TestStaleTermStopsTheDispatch(t *testing.T) {
	r, _ := newRig(t, 8, 8, 8)
	r.tick()
	stale := &staleDispatcher{fakeCluster: r.cl}
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: stale, StatePath: r.state})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Place(context.Background(), echo)
	if !errors.Is(err, ctl.ErrStaleTerm) {
		t.Fatalf("Place: %v, want stale_term", err)
	}
	if stale.places != 1 || len(rep.Attempts) != 1 || rep.Attempts[0].Code != ctl.CodeStaleTerm {
		t.Fatalf("%d places sent, attempts %+v; want the first only", stale.places, rep.Attempts)
	}
	ps := c.Placements()
	if len(ps) != 1 || ps[0].Life != LifeUnsettled {
		t.Fatalf("placements %+v, want one unsettled", ps)
	}
}
