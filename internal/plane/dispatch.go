package plane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
)

// dispatchRecord is the payload of KindDispatch.
type dispatchRecord struct {
	DecisionID string `json:"decision_id"`
	Node       string `json:"node"`
	Variant    string `json:"variant"`
	Outcome    string `json:"outcome"`
	Code       string `json:"code,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Reconcile  string `json:"reconcile,omitempty"`
	Next       string `json:"next"`
}

// placedRecord is the payload of KindPlaced and KindAdopted.
type placedRecord struct {
	DecisionID string `json:"decision_id"`
	Node       string `json:"node"`
	Variant    string `json:"variant"`
	InstanceID string `json:"instance_id"`
	Attempt    int    `json:"attempt"`
}

const (
	nextCandidate = "trying the next candidate"
	nextStopped   = "stopped: the target may hold the instance"
	nextNone      = "no candidate left"
)

// dispatch sends the place down pl's candidates from pl.Cursor (see the
// package doc). The caller marks pl busy for the call. Before each place, pl names the node
// being tried and is persisted, so a crash leaves a decision that a
// restart treats as unsettled on that node.
func (c *writer) dispatch(ctx context.Context, p Package, o Order, pl *Placement, timeout time.Duration) ([]Attempt, error) {
	v := p.Verified()
	var attempts []Attempt
	for i := pl.Cursor; i < len(pl.Candidates); i++ {
		c.mu.Lock()
		if why := c.rec.takenLocked(pl, pl.Candidates[i].Node); why != "" {
			// Another instance of the workload went there since the
			// decision (a settled decision resumes down its candidates).
			c.mu.Unlock()
			attempts = append(attempts, Attempt{Node: pl.Candidates[i].Node, Variant: pl.Candidates[i].Variant, Outcome: outSkipped, Reason: why})
			continue
		}
		pl.aim(v, i)
		pl.Life = LifeDispatching
		node, variant, iid := pl.Node, pl.Variant, pl.InstanceID
		c.mu.Unlock()
		if err := c.persist(); err != nil {
			// Nothing was sent to node; a later tick settles it.
			c.setLife(pl, LifeUnsettled)
			c.met.placements.WithLabelValues(outUnsettled).Inc()
			return attempts, err
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		res, err := c.disp.PlaceDecided(cctx, node, p, variant, o.Config, o.Start, pl.DecisionID)
		cancel()
		if err == nil {
			if res.InstanceID != "" {
				iid = res.InstanceID
			}
			attempts = append(attempts, Attempt{Node: node, Variant: variant, Outcome: outPlaced})
			c.met.dispatches.WithLabelValues(outPlaced).Inc()
			return attempts, c.settled(ctx, pl, KindPlaced, iid, res.Status.State, len(attempts))
		}
		var ce *ctl.CallError
		if !errors.As(err, &ce) {
			// Nothing was sent (a bad package, an invalid call): no
			// candidate can take it.
			attempts = append(attempts, Attempt{Node: node, Variant: variant, Outcome: outError, Reason: err.Error()})
			c.met.dispatches.WithLabelValues(outError).Inc()
			c.abandon(pl, err.Error())
			c.met.placements.WithLabelValues(outError).Inc()
			return attempts, errors.Join(err, c.persist())
		}
		at := Attempt{Node: node, Variant: variant, Reason: ce.Error()}
		rec := dispatchRecord{DecisionID: pl.DecisionID, Node: node, Variant: variant, Reason: ce.Error(), Next: nextCandidate}
		if ce.Refusal != nil {
			at.Code = ce.Refusal.Code
			rec.Code = string(ce.Refusal.Code)
		}
		switch ce.Class {
		case ctl.ClassIndeterminate:
			at.Outcome, rec.Outcome = outIndeterm, outIndeterm
			c.met.dispatches.WithLabelValues(outIndeterm).Inc()
			found, state, settled, note := c.reconcile(ctx, node, pl.DecisionID, iid)
			rec.Reconcile = note
			at.Reason += "; " + note
			switch {
			case found:
				attempts = append(attempts, at)
				c.met.dispatches.WithLabelValues(outAdopted).Inc()
				rec.Next = "adopted"
				if _, err := c.appendChain(KindDispatch, rec); err != nil {
					return attempts, err
				}
				return attempts, c.settled(ctx, pl, KindAdopted, iid, state, len(attempts))
			case !settled:
				attempts = append(attempts, at)
				rec.Next = nextStopped
				c.setLife(pl, LifeUnsettled)
				c.met.placements.WithLabelValues(outUnsettled).Inc()
				c.updateGauges()
				_, cerr := c.appendChain(KindDispatch, rec)
				return attempts, errors.Join(cerr, c.persist())
			}
		case ctl.ClassRefused:
			at.Outcome, rec.Outcome = outRefused, outRefused
			c.met.dispatches.WithLabelValues(outRefused).Inc()
			if errors.Is(err, ctl.ErrStaleTerm) {
				// The host saw a newer leader: this controller was deposed
				// and sends nothing more (the next candidate would be a
				// second copy if the new leader places too). It stays
				// unsettled for whoever leads.
				attempts = append(attempts, at)
				rec.Next = nextStopped
				c.setLife(pl, LifeUnsettled)
				c.met.placements.WithLabelValues(outUnsettled).Inc()
				c.updateGauges()
				_, cerr := c.appendChain(KindDispatch, rec)
				return attempts, errors.Join(err, cerr, c.persist())
			}
		default:
			at.Outcome, rec.Outcome = outUnreachable, outUnreachable
			c.met.dispatches.WithLabelValues(outUnreachable).Inc()
		}
		attempts = append(attempts, at)
		if i == len(pl.Candidates)-1 {
			rec.Next = nextNone
		}
		if _, err := c.appendChain(KindDispatch, rec); err != nil {
			// A decision whose record cannot be written goes no further.
			c.setLife(pl, LifeUnsettled)
			return attempts, errors.Join(err, c.persist())
		}
	}
	c.abandon(pl, "every candidate refused or was unreachable")
	c.met.placements.WithLabelValues(outExhausted).Inc()
	return attempts, c.persist()
}

func (c *writer) setLife(pl *Placement, l Lifecycle) {
	c.mu.Lock()
	pl.Life = l
	c.mu.Unlock()
}

// settled records that pl's instance iid is on pl.Node (placed, or
// adopted after an unanswered place), finishes the replacement it is part
// of, chains it and persists.
func (c *writer) settled(ctx context.Context, pl *Placement, kind, iid, hostState string, attempt int) error {
	c.mu.Lock()
	pl.Life = LifePlaced
	// Settled: the ranked candidates are walked no more (the chained
	// decision keeps them).
	pl.Candidates, pl.Cursor = nil, 0
	pl.PlacedAt = c.now()
	pl.InstanceID = iid
	pl.HostState = hostState
	if pl.HostState == "" {
		pl.HostState = ctl.StateLoaded
		if pl.Order != nil && pl.Order.Start {
			pl.HostState = ctl.StateRunning
		}
	}
	pl.WasRunning = live(pl.HostState)
	var old *Placement
	if pl.Replaces != "" {
		old = c.placements[pl.Replaces]
	}
	if old != nil && old.Node != pl.Node {
		// A move: the workload left the node it was lost on.
		pl.Moves = c.rec.recordMove(pl.Moves, pl.PlacedAt)
	}
	rec := placedRecord{DecisionID: pl.DecisionID, Node: pl.Node, Variant: pl.Variant, InstanceID: iid, Attempt: attempt}
	c.mu.Unlock()
	if kind == KindPlaced {
		c.met.placements.WithLabelValues(outPlaced).Inc()
	}
	c.updateGauges()
	// Persist the new placement before anything else happens to the old.
	if err := c.persist(); err != nil {
		return err
	}
	_, err := c.appendChain(kind, rec)
	if old != nil {
		err = errors.Join(err, c.replaced(ctx, old, pl))
	}
	return err
}

// abandon drops a placement whose decision placed nothing, and frees the
// placement it would have replaced for a later attempt.
func (c *writer) abandon(pl *Placement, why string) {
	// Best effort: the placement is dropped whether or not this is chained
	// (every attempt of it was chained already).
	_, _ = c.appendChain(KindDispatch, dispatchRecord{DecisionID: pl.DecisionID, Node: pl.Node, Variant: pl.Variant,
		Outcome: "abandoned", Reason: why, Next: nextNone})
	c.mu.Lock()
	delete(c.placements, pl.DecisionID)
	var old *Placement
	if pl.Replaces != "" {
		old = c.placements[pl.Replaces]
	}
	c.mu.Unlock()
	if old != nil {
		c.life.rescheduleFailed(old, why)
	}
	c.updateGauges()
}

// reconcile asks node whether it holds the instance of decisionID after a
// place that went without an answer. found: it does (adopt it); settled
// && !found: it does not and is not handling the decision (try the next
// candidate); !settled: it cannot say now.
func (c *writer) reconcile(ctx context.Context, node, decisionID, iid string) (found bool, state string, settled bool, note string) {
	cctx, cancel := context.WithTimeout(ctx, c.conf().DescribeTimeout)
	defer cancel()
	st, err := c.disp.Status(cctx, node)
	if err != nil {
		return false, "", false, fmt.Sprintf("not reconciled: %v", err)
	}
	return matchStatus(st, decisionID, iid)
}

// matchStatus looks for a decision's instance in a node's listing.
func matchStatus(st ctl.StatusList, decisionID, iid string) (found bool, state string, settled bool, note string) {
	for _, in := range st.Instances {
		if in.InstanceID == iid || (in.DecisionID != "" && in.DecisionID == decisionID) {
			return true, in.Lifecycle, true, "reconciled: the node holds the instance"
		}
	}
	for _, d := range st.InFlight {
		if d == decisionID {
			return false, "", false, "not reconciled: the target is still handling this decision"
		}
	}
	return false, "", true, "reconciled: the node does not hold the instance"
}
