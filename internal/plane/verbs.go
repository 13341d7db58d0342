package plane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

// Errors of the operator's instance verbs.
var (
	// ErrUnknownPlacement: no placement has the instance or decision id.
	ErrUnknownPlacement = errors.New("no placement has this instance or decision id")
	// ErrAmbiguousPlacement: a decision id prefix names more than one
	// placement.
	ErrAmbiguousPlacement = errors.New("the decision id prefix names more than one placement: give more of it")
	// ErrPlacementBusy: the placement's decision is still being placed
	// (dispatching or unsettled); try again once it settles.
	ErrPlacementBusy = errors.New("the placement is still being placed")
	// ErrNotStartable: the placement is not placed (lost, replaced,
	// retiring): there is no instance of it to start.
	ErrNotStartable = errors.New("the placement has no instance to start")
	// ErrStartRevoked: the placement's package id, manifest hash, signer
	// or an artifact is revoked on the controller's list (reference
	// 4.8): a revoked workload is started nowhere, while stop and unload
	// stay possible. The error also wraps the *pkg.VerifyError that
	// names the subject.
	ErrStartRevoked = errors.New("start refused: revoked")
)

// Instance verbs through the controller.
const (
	VerbStart  = "start"
	VerbStop   = "stop"
	VerbUnload = "unload"
)

// instanceRecord is the payload of KindInstance: an operator's stop or
// unload through the controller, chained before the call.
type instanceRecord struct {
	Verb       string `json:"verb"`
	Phase      string `json:"phase"`
	DecisionID string `json:"decision_id"`
	InstanceID string `json:"instance_id"`
	Node       string `json:"node"`
	Workload   string `json:"workload"`
	Declared   string `json:"declared,omitempty"`
	// TierWaived is set when the node's tier would not admit the
	// workload's kind any more (a demoted or removed peer): teardown is
	// never blocked by a tier, and the waiver is chained.
	TierWaived bool   `json:"teardown_node_tier_waived,omitempty"`
	Waiver     string `json:"waiver,omitempty"`
}

// Stop stops the instance of a placement, named by its instance id or
// decision id (reference 3.5.2): the request is chained, then sent; on
// success the placement records that the operator stopped it, so the
// lifecycle does not place it again when its node dies (it was not
// running), and a declared workload's upgrade leaves it alone. Starting
// it again on its node (the node reports it live) clears that.
func (c *operatorVerbs) Stop(ctx context.Context, ref string) (Placement, error) {
	return c.teardown(ctx, VerbStop, ref)
}

// Unload unloads the instance of a placement, named by its instance id or
// decision id, and forgets the placement (an instance its node no longer
// knows is forgotten too). The lifecycle never places it again; a
// declared workload's reconciliation places the replica anew, as
// declared (remove the declaration, or lower its replicas, to take it
// down for good; stop it to keep it down).
func (c *operatorVerbs) Unload(ctx context.Context, ref string) (Placement, error) {
	return c.teardown(ctx, VerbUnload, ref)
}

// Start starts the instance of a placement again, named by its instance
// id or decision id: the request is chained, then sent to its node, whose
// host starts it under its supervision; on success the placement is no
// longer one the operator stopped: it is watched, and rescheduled when
// its node dies, as any running instance (reference 4.5). Only a placed
// instance is started (ErrNotStartable otherwise); a node whose tier no
// longer admits the kind is refused like a place would be, as starting
// runs the workload there again (the chained request says so).
//
// A lost placement that is capped (Placement.Capped) is not started on
// its node: the start clears its cap and its backoff, and the next tick
// places it again.
//
// First of all, a placement whose package id or manifest hash the
// controller's revocation list revokes, or whose package directory (if
// still there) verifies as revoked (a signer, an artifact), is not
// started: the refusal is chained (KindRefuse, phase start, with the
// subject) and the error wraps ErrStartRevoked; the placement is returned
// with it (its node names where the start was refused).
func (c *operatorVerbs) Start(ctx context.Context, ref string) (Placement, error) {
	c.mu.Lock()
	pl, err := c.findLocked(ref)
	if err != nil {
		c.mu.Unlock()
		return Placement{}, fmt.Errorf("start %s: %w", ref, err)
	}
	snap := pl.clone()
	c.mu.Unlock()
	if err := c.refuseRevokedStart(ctx, snap); err != nil {
		return snap, err
	}
	c.mu.Lock()
	if pl, err = c.findLocked(ref); err != nil {
		// Forgotten while the revocation list was read.
		c.mu.Unlock()
		return Placement{}, fmt.Errorf("start %s: %w", ref, err)
	}
	if c.busy[pl.DecisionID] || pl.Life == LifeDispatching || pl.Life == LifeUnsettled {
		c.mu.Unlock()
		return Placement{}, fmt.Errorf("start %s: decision %s: %w", ref, pl.DecisionID, ErrPlacementBusy)
	}
	if pl.Life == LifeLost && pl.Capped {
		// Capped (moved max_reschedules times in the window): the start
		// clears the cap; the next tick places it again.
		rec := c.w.uncapLocked(pl)
		out := pl.clone()
		c.mu.Unlock()
		_, cerr := c.w.appendChain(KindLifecycle, rec)
		c.w.updateGauges()
		return out, errors.Join(cerr, c.w.persist())
	}
	if pl.Life != LifePlaced {
		c.mu.Unlock()
		return Placement{}, fmt.Errorf("start %s: decision %s is %s: %w", ref, pl.DecisionID, pl.Life, ErrNotStartable)
	}
	demoted, why := c.tierWaiverLocked(pl)
	rec := instanceRecord{Verb: VerbStart, Phase: "request", DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node,
		Workload: pl.Workload, Declared: pl.Declared}
	node, iid := pl.Node, pl.InstanceID
	c.mu.Unlock()
	if demoted {
		rec.Phase, rec.Waiver = "refused", why
		_, cerr := c.w.appendChain(KindInstance, rec)
		return Placement{}, errors.Join(fmt.Errorf("start %s on %s: %w: %s", iid, node, ErrNotStartable, why), cerr)
	}
	if _, err := c.w.appendChain(KindInstance, rec); err != nil {
		return Placement{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.conf().RescheduleTimeout)
	err = c.disp.Start(cctx, node, iid)
	cancel()
	if err != nil {
		return Placement{}, fmt.Errorf("start %s on %s: %w", iid, node, err)
	}
	c.mu.Lock()
	from := pl.HostState
	pl.Stopped, pl.HostState, pl.WasRunning = false, ctl.StateRunning, true
	c.verbDoneLocked(pl)
	pl.Attempts, pl.NextAttempt, pl.LastError = 0, time.Time{}, ""
	out := pl.clone()
	lrec := lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: iid, Node: node, Workload: pl.Workload,
		From: from, To: ctl.StateRunning, Reason: "started by the operator"}
	c.mu.Unlock()
	_, cerr := c.w.appendChain(KindLifecycle, lrec)
	return out, errors.Join(cerr, c.w.persist())
}

// startRefusal is the payload of the KindRefuse record of a start the
// controller refused (phase start).
type startRefusal struct {
	Phase      string       `json:"phase"`
	DecisionID string       `json:"decision_id"`
	InstanceID string       `json:"instance_id"`
	Node       string       `json:"node"`
	Workload   string       `json:"workload"`
	Reason     string       `json:"reason"`
	Revoked    *pkg.Subject `json:"revoked,omitempty"`
}

// revokedStartError is the refusal of a revoked placement's start: it
// wraps ErrStartRevoked and the revocation (a *pkg.VerifyError).
type revokedStartError struct {
	instance string
	err      error
}

func (e *revokedStartError) Error() string {
	return "start of " + e.instance + " refused: " + e.err.Error()
}

func (e *revokedStartError) Unwrap() []error { return []error{ErrStartRevoked, e.err} }

// refuseRevokedStart checks pl against the revocation list: its package
// id and manifest hash as the placement records them, then its signers
// and file hashes by verifying its package directory again, if it is
// still there (else the host's own check stands). A revoked one is
// refused and the refusal chained; nil means the start may go on.
func (c *operatorVerbs) refuseRevokedStart(ctx context.Context, pl Placement) error {
	if c.rev == nil {
		return nil
	}
	err := c.rev.Check(&pkg.Manifest{ID: pl.Package}, pl.ManifestHash)
	if err == nil && pl.Order != nil && (pl.Order.PackageDir != "" || pl.Order.Kept != "") {
		if _, verr := c.kp.placedPackage(ctx, pl.Order, pl.ManifestHash); pkg.ErrorCode(verr) == pkg.CodeRevoked {
			err = verr
		}
	}
	if err == nil {
		return nil
	}
	rec := startRefusal{Phase: VerbStart, DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node,
		Workload: pl.Workload, Reason: err.Error()}
	if ve, ok := errors.AsType[*pkg.VerifyError](err); ok {
		rec.Revoked = ve.Subject
	}
	if _, cerr := c.w.appendChain(KindRefuse, rec); cerr != nil {
		// Not started either way; the operator learns it was not chained.
		return fmt.Errorf("start of %s refused, and not chained: %w", pl.InstanceID, cerr)
	}
	return &revokedStartError{instance: pl.InstanceID, err: err}
}

// findLocked finds the placement ref names: its decision id, its instance
// id (the placement that has it in the most current life), or a unique
// prefix of its decision id (ctl.ValidDecisionPrefix; ErrAmbiguousPlacement when it names several, so a verb never
// guesses). The caller holds mu.
func (c *operatorVerbs) findLocked(ref string) (*Placement, error) {
	if p, ok := c.placements[ref]; ok {
		return p, nil
	}
	rank := map[Lifecycle]int{LifePlaced: 0, LifeLost: 1, LifeRetiring: 2, LifeRescheduled: 3, LifeUnsettled: 4, LifeDispatching: 5}
	var best *Placement
	for _, p := range c.rec.sortedLocked() {
		if p.InstanceID == ref && (best == nil || rank[p.Life] < rank[best.Life]) {
			best = p
		}
	}
	if best != nil {
		return best, nil
	}
	return byDecisionPrefix(c.placements, ref)
}

// byDecisionPrefix is the one placement whose decision id starts with
// prefix (ctl.ValidDecisionPrefix).
func byDecisionPrefix(placements map[string]*Placement, prefix string) (*Placement, error) {
	if !ctl.ValidDecisionPrefix(prefix) {
		return nil, ErrUnknownPlacement
	}
	var found *Placement
	n := 0
	for id, p := range placements {
		if strings.HasPrefix(id, prefix) {
			found = p
			n++
		}
	}
	switch {
	case n == 0:
		return nil, ErrUnknownPlacement
	case n > 1:
		return nil, fmt.Errorf("%w (%d match)", ErrAmbiguousPlacement, n)
	}
	return found, nil
}

// tierWaiverLocked says whether tearing down pl is a teardown the node's
// tier would not allow for placing: the node is no longer a target, or
// its tier is below the kind's min_tier. The caller holds mu.
func (c *operatorVerbs) tierWaiverLocked(pl *Placement) (bool, string) {
	n, ok := c.nodes[pl.Node]
	if !ok {
		return true, "node " + pl.Node + " is no longer a target"
	}
	rule, admitted := c.conf().Policy.Kinds[pl.Kind]
	if admitted && n.target.Tier < rule.MinTier {
		return true, fmt.Sprintf("node tier %s is below min_tier %s of kind %s", n.target.Tier, rule.MinTier, pl.Kind)
	}
	return false, ""
}

// verbDoneLocked notes that the operator's start or stop, or a place,
// changed pl (see Controller.verbs). c.mu is held.
func (c *operatorVerbs) verbDoneLocked(pl *Placement) {
	c.verbs++
	if c.verbAt == nil {
		c.verbAt = map[string]uint64{}
	}
	c.verbAt[pl.DecisionID] = c.verbs
}

// teardown runs verb (stop or unload) on the placement ref names.
// Governance does not block a teardown: the policy says where workloads
// may be placed, and taking one down never places anything; a node whose
// tier would not admit the workload any more (a demoted peer) is waived,
// and the waiver is chained with the request.
func (c *operatorVerbs) teardown(ctx context.Context, verb, ref string) (Placement, error) {
	c.mu.Lock()
	pl, err := c.findLocked(ref)
	if err != nil {
		c.mu.Unlock()
		return Placement{}, fmt.Errorf("%s %s: %w", verb, ref, err)
	}
	if c.busy[pl.DecisionID] || pl.Life == LifeDispatching || pl.Life == LifeUnsettled {
		c.mu.Unlock()
		return Placement{}, fmt.Errorf("%s %s: decision %s: %w", verb, ref, pl.DecisionID, ErrPlacementBusy)
	}
	waived, why := c.tierWaiverLocked(pl)
	rec := instanceRecord{Verb: verb, Phase: "request", DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node,
		Workload: pl.Workload, Declared: pl.Declared, TierWaived: waived, Waiver: why}
	node, iid := pl.Node, pl.InstanceID
	c.mu.Unlock()
	if _, err := c.w.appendChain(KindInstance, rec); err != nil {
		return Placement{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.conf().RescheduleTimeout)
	if verb == VerbStop {
		err = c.disp.Stop(cctx, node, iid)
	} else {
		err = c.disp.Unload(cctx, node, iid)
	}
	cancel()
	var ce *ctl.CallError
	gone := errors.As(err, &ce) && ce.Refusal != nil && ce.Refusal.Code == ctl.CodeUnknownInstance
	if err != nil && !(gone && verb == VerbUnload) {
		return Placement{}, fmt.Errorf("%s %s on %s: %w", verb, iid, node, err)
	}
	if verb == VerbUnload {
		reason := "unloaded by the operator"
		if gone {
			reason = "unloaded by the operator (its node no longer had it)"
		}
		c.mu.Lock()
		out := pl.clone()
		c.mu.Unlock()
		err := errors.Join(c.w.forget(pl, reason), c.w.persist())
		c.w.updateGauges()
		return out, err
	}
	c.mu.Lock()
	from := pl.HostState
	pl.Stopped, pl.HostState, pl.WasRunning = true, ctl.StateStopped, false
	c.verbDoneLocked(pl)
	pl.Attempts, pl.NextAttempt, pl.LastError = 0, time.Time{}, ""
	out := pl.clone()
	lrec := lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: iid, Node: node, Workload: pl.Workload,
		From: from, To: ctl.StateStopped, Reason: "stopped by the operator"}
	c.mu.Unlock()
	_, cerr := c.w.appendChain(KindLifecycle, lrec)
	return out, errors.Join(cerr, c.w.persist())
}
