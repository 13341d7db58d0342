package plane

// The swap under memory pressure: when no node fits a demanded on-demand
// workload, idle on-demand instances may be unloaded to make room. The
// choice is chooseEvictions (engine.Evict, swapengine.go); the
// writer unloads what it chose, chained "evicted for <workload>", lowers
// the evicted workloads' demand and takes them off the controller's
// accounting (their placements are gone once their node confirms the
// unload), then wakes the tick: the next tick describes the node afresh
// and places the demanded workload, its decision's explanation naming
// what was evicted for it.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
)

// swapInput is what the eviction choice decides from: the demanded
// workload's engine request and the view where it fits nowhere, and the
// instances on the nodes.
type swapInput struct {
	Now time.Time
	// DemandSince is when the demand being met rose from none (zero:
	// now): how long it waited ends the grace of recently used instances.
	DemandSince time.Time
	// Grace is the eviction policy's grace (Config.SwapGrace).
	Grace     time.Duration
	Request   engine.Request
	Nodes     []engine.Node
	Weights   engine.Weights
	Residents []swapResident
}

// swapResident is one placed instance as the eviction choice sees it
// (engine.Resident, with the placement's id).
type swapResident struct {
	DecisionID, InstanceID string
	Kind, Workload, Node   string
	Declared               engine.Resources
	OnDemand               bool
	// ReadySince is when it was first seen running (zero while it
	// starts); LastRequest and InFlight are its host's activity.
	ReadySince   time.Time
	LastRequest  time.Time
	InFlight     int
	MinResidency time.Duration
	EvictCost    int
	// LoadTime is how long it took from its placement to first being
	// seen running (0: unknown).
	LoadTime time.Duration
}

// swapChoice is the eviction choice's answer: the node the workload goes
// to and the placements (decision ids) to unload there, and the lines
// that explain it.
type swapChoice struct {
	Node    string
	Evict   []string
	Explain []string
	// RetryAt, with nothing to evict, is when a protection of an instance
	// that would make room lapses (its grace or min_residency): the
	// demanded workload is tried again then rather than after its
	// doubling backoff.
	RetryAt time.Time
}

// chooseEvictions chooses what to evict so the demanded workload fits
// (ok false: nothing can be done now): engine.Evict (engineEvictions).
// Tests may replace it; nil means no swap, the workload waits for room as
// any unplaceable declared workload does.
var chooseEvictions = engineEvictions

// swapResidentsLocked lists the placed instances for the choice. The
// caller holds mu.
func (c *reconciler) swapResidentsLocked() []swapResident {
	od := map[string]*OnDemand{}
	for _, w := range c.conf().Workloads {
		if w.OnDemand != nil {
			od[w.Name] = w.OnDemand
		}
	}
	var out []swapResident
	for _, p := range c.sortedLocked() {
		if p.Life != LifePlaced && p.Life != LifeDispatching && p.Life != LifeUnsettled {
			continue
		}
		r := swapResident{DecisionID: p.DecisionID, InstanceID: p.InstanceID, Kind: p.Kind, Workload: p.Workload, Node: p.Node,
			Declared: p.Reserved.engine()}
		if o := od[p.Declared]; o != nil && p.Life == LifePlaced {
			r.OnDemand, r.MinResidency, r.EvictCost = true, o.MinResidency, o.EvictCost
			r.ReadySince = c.odReady[p.DecisionID]
			if !r.ReadySince.IsZero() && !p.PlacedAt.IsZero() && r.ReadySince.After(p.PlacedAt) {
				r.LoadTime = r.ReadySince.Sub(p.PlacedAt)
			}
			if act, ok := c.activityLocked(p); ok {
				r.LastRequest, r.InFlight = act.LastRequest, int(act.InFlight)
			} else {
				// No activity known: it may be serving; never evicted.
				r.InFlight = 1
			}
		}
		out = append(out, r)
	}
	return out
}

// evictableLocked says why the placement id may not be evicted for
// workload name at now ("" when it may): the writer checks the choice
// against the rules it must never break. The caller holds mu.
func (c *reconciler) evictableLocked(id, name string, now time.Time) (*Placement, string) {
	p, ok := c.placements[id]
	if !ok {
		return nil, "no such placement"
	}
	w, ok := c.declared(p.Declared)
	switch {
	case !ok || w.OnDemand == nil:
		return nil, "not on demand"
	case p.Declared == name:
		return nil, "of the demanded workload"
	case p.Life != LifePlaced || c.busy[id]:
		return nil, "not placed"
	}
	ready, seen := c.odReady[id]
	act, known := c.activityLocked(p)
	switch {
	case !seen:
		return nil, "starting"
	case !known || act.InFlight > 0:
		return nil, "serving requests"
	case now.Sub(ready) < w.OnDemand.MinResidency:
		return nil, "inside min_residency"
	}
	return p, ""
}

// swap asks the eviction choice for room for on-demand workload w (no
// node fits it: dec, for request req) and unloads what it chose. done
// is true when something was evicted: the tick is woken and the next one
// places w.
func (c *lifecycle) swap(ctx context.Context, w Workload, req engine.Request, now time.Time) (done bool, retryAt time.Time, err error) {
	choose := chooseEvictions
	if choose == nil || w.OnDemand == nil {
		return false, time.Time{}, nil
	}
	nodes := c.rec.view(now, req.Kind, req.Name)
	c.mu.Lock()
	in := swapInput{Now: now, Request: req, Nodes: nodes, Weights: c.conf().Weights, Residents: c.rec.swapResidentsLocked(),
		Grace: c.conf().SwapGrace}
	if st := c.decls[w.Name]; st != nil {
		in.DemandSince = st.DemandedAt
	}
	c.mu.Unlock()
	ch, ok := choose(in)
	if !ok || len(ch.Evict) == 0 {
		return false, ch.RetryAt, nil
	}
	type ev struct {
		pl  *Placement
		rec lifecycleRecord
	}
	var evs []ev
	c.mu.Lock()
	for _, id := range ch.Evict {
		pl, why := c.rec.evictableLocked(id, w.Name, now)
		if why != "" {
			c.mu.Unlock()
			return false, time.Time{}, fmt.Errorf("eviction for %s refused: placement %.12s: %s", w.Name, id, why)
		}
		evs = append(evs, ev{pl: pl, rec: c.w.retireLocked(pl, "evicted for "+w.Name)})
		c.w.lowerDemandLocked(pl.Declared, false)
	}
	st := c.decls[w.Name]
	if st != nil {
		st.NextAttempt = time.Time{}
	}
	names := make([]string, len(evs))
	for i, e := range evs {
		names[i] = e.pl.Declared
	}
	c.evictedFor[w.Name] = append(slices.Clone(ch.Explain), evictedNote(evs[0].pl.Node, ch.Evict, names))
	c.mu.Unlock()
	var errs []error
	for _, e := range evs {
		errs = append(errs, c.w.chainRetired(e.rec, nil))
		c.met.evictions.WithLabelValues(e.pl.Declared).Inc()
	}
	errs = append(errs, c.w.persist())
	for _, e := range evs {
		errs = append(errs, c.orphanUnload(ctx, e.pl, now))
	}
	c.wakeTick()
	return true, time.Time{}, errors.Join(errs...)
}

// evictedNote is the explanation's line of an eviction.
func evictedNote(node string, ids, workloads []string) string {
	s := "evicted on " + node + " to make room:"
	for i, id := range ids {
		s += fmt.Sprintf(" %s (decision %.12s)", workloads[i], id)
	}
	return s
}
