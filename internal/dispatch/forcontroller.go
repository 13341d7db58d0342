package dispatch

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
)

// ForController is the controller's Dispatcher (plane.Dispatcher) over a
// Dispatcher: calls go over the mesh (or to this node's own host for the
// self target), signed with the node key, and packages are verified
// against the controller's anchors and the node's revocation list.
//
// Every call carries the controller's raft term (ForControllerDeps.Term,
// read at each call). A host that has seen a higher term from its
// controllers refuses it: the error is a ClassRefused *ctl.CallError with
// ctl.CodeStaleTerm, which errors.Is matches as ctl.ErrStaleTerm. It means
// this controller was deposed: it must stop acting, not try the next
// candidate as for any other refusal (the host fences it off, and would
// fence it off on every other host too).
type ForController struct {
	d    *Dispatcher
	rev  *pkg.Revocations
	term func() uint64
	// anchors are the controller's trust anchors; a reload swaps them.
	anchors     atomic.Pointer[pkg.Anchors]
	afterPlace  func(ctx context.Context, node string) error
	beforePlace func(ctx context.Context)
}

var _ plane.Dispatcher = (*ForController)(nil)

// ForControllerDeps are what ForController adds to its Dispatcher.
type ForControllerDeps struct {
	// Revocations is the node's revocation list packages are checked
	// against; nil checks none.
	Revocations *pkg.Revocations
	// Anchors are the controller's trust anchors (SetAnchors swaps them).
	Anchors pkg.Anchors
	// Term returns the raft term this controller leads in: the term of the
	// election it won, kept for as long as it acts on that leadership.
	// Every call carries it, read when the call is made. It must not be
	// raft's current term (raft.CurrentTerm): a deposed leader turned
	// candidate raises that, and would fence the true leader off every
	// host it reached. nil means 0: no term, as a controller that
	// replicates nothing (hosts fence no such call until they have seen a
	// term from their controllers, then refuse its mutations).
	Term func() uint64
	// Hooks are test hooks on the place path; the daemon sets none.
	Hooks PlaceHooks
}

// PlaceHooks are ForController's test hooks on the place path.
type PlaceHooks struct {
	// After, when set, runs after a node answered a place and before the
	// controller learns of it: a hook for crashes on the place path. A
	// non-nil error loses the answer: the controller sees an
	// indeterminate place, as if the link had failed before it arrived.
	After func(ctx context.Context, node string) error
	// Before, when set, runs before a place is sent, after the controller
	// persisted the candidate.
	Before func(ctx context.Context)
}

// NewForController returns the controller's Dispatcher over d.
func NewForController(d *Dispatcher, deps ForControllerDeps) *ForController {
	p := &ForController{d: d, rev: deps.Revocations, term: deps.Term, afterPlace: deps.Hooks.After, beforePlace: deps.Hooks.Before}
	if p.term == nil {
		p.term = func() uint64 { return 0 }
	}
	p.SetAnchors(deps.Anchors)
	return p
}

// call sends one call at the controller's current term; the dispatcher
// chains its own decision for a mutation.
func (p *ForController) call(ctx context.Context, node string, method ctl.Method, params any) (*ctl.Answer, error) {
	return p.d.callAtTerm(ctx, node, method, params, "", p.term())
}

// SetAnchors puts the controller's trust anchors in force (a reload).
func (p *ForController) SetAnchors(a pkg.Anchors) { p.anchors.Store(&a) }

// Describe returns node's signed facts and, when the node lets this one
// read it, its instance listing with the departed instances.
func (p *ForController) Describe(ctx context.Context, node string) (plane.Description, error) {
	ans, err := p.call(ctx, node, ctl.MethodDescribe, nil)
	if err != nil {
		return plane.Description{}, err
	}
	desc, err := plane.DecodeDescribe(ans.Response.Result)
	if err != nil {
		return plane.Description{}, fmt.Errorf("%s: %w", node, err)
	}
	if st, err := p.Status(ctx, node); err == nil {
		desc.Status = &st
	}
	return desc, nil
}

// VerifyPackage verifies dir against the controller's anchors and the
// node's revocation list (hashing its files once per manifest).
func (p *ForController) VerifyPackage(ctx context.Context, dir string) (plane.Package, error) {
	var anchors pkg.Anchors
	if a := p.anchors.Load(); a != nil {
		anchors = *a
	}
	if len(anchors) == 0 {
		return nil, fmt.Errorf("package %s: %w: the controller has no trust anchors (controller.trust_anchors, host.trust_anchors)", dir, ErrBadPackage)
	}
	vp, err := p.d.VerifyPackage(ctx, dir, anchors, p.rev)
	if err != nil {
		return nil, err
	}
	return vp, nil
}

// PlaceDecided places a package VerifyPackage returned under the
// controller's decision.
func (p *ForController) PlaceDecided(ctx context.Context, node string, pk plane.Package, variant string, cfg ctl.InstanceConfig, start bool, decisionID string) (ctl.PlaceResult, error) {
	vp, ok := pk.(VerifiedPackage)
	if !ok {
		return ctl.PlaceResult{}, fmt.Errorf("place on %s: not a package this dispatcher verified: %w", node, ErrBadPackage)
	}
	if p.beforePlace != nil {
		p.beforePlace(ctx)
	}
	ans, err := p.d.placeAtTerm(ctx, node, vp, variant, cfg, start, decisionID, p.term())
	if err != nil {
		return ctl.PlaceResult{}, err
	}
	if p.afterPlace != nil {
		if err := p.afterPlace(ctx, node); err != nil {
			return ctl.PlaceResult{}, &ctl.CallError{Class: ctl.ClassIndeterminate, Method: ctl.MethodPlace, Err: err}
		}
	}
	var res ctl.PlaceResult
	if err := ctl.DecodeResult(ans.Response.Result, &res); err != nil {
		// The node acted (it answered ok) but said what in a way we cannot
		// read: the controller reconciles it as an unanswered place.
		return ctl.PlaceResult{}, &ctl.CallError{Class: ctl.ClassIndeterminate, Method: ctl.MethodPlace, Err: err}
	}
	return res, nil
}

// Status lists node's instances, in-flight decisions and departed
// instances.
func (p *ForController) Status(ctx context.Context, node string) (ctl.StatusList, error) {
	ans, err := p.call(ctx, node, ctl.MethodStatus, ctl.InstanceParams{IncludeDeparted: true})
	if err != nil {
		return ctl.StatusList{}, err
	}
	var st ctl.StatusList
	if err := ctl.DecodeResult(ans.Response.Result, &st); err != nil {
		return ctl.StatusList{}, fmt.Errorf("status of %s: %w", node, err)
	}
	return st, nil
}

// Start starts an instance again; the dispatcher chains its own decision.
func (p *ForController) Start(ctx context.Context, node, instanceID string) error {
	_, err := p.call(ctx, node, ctl.MethodStart, ctl.InstanceParams{InstanceID: instanceID})
	return err
}

// Stop stops an instance; the dispatcher chains its own decision.
func (p *ForController) Stop(ctx context.Context, node, instanceID string) error {
	_, err := p.call(ctx, node, ctl.MethodStop, ctl.InstanceParams{InstanceID: instanceID})
	return err
}

// Unload unloads an instance; the dispatcher chains its own decision.
func (p *ForController) Unload(ctx context.Context, node, instanceID string) error {
	_, err := p.call(ctx, node, ctl.MethodUnload, ctl.InstanceParams{InstanceID: instanceID})
	return err
}
