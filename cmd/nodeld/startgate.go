package main

import (
	"context"
	"errors"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
)

// startRefusal is the payload of the plane.refuse record of a start the
// controller refused (phase "start").
type startRefusal struct {
	Phase      string       `json:"phase"`
	DecisionID string       `json:"decision_id"`
	InstanceID string       `json:"instance_id"`
	Node       string       `json:"node"`
	Workload   string       `json:"workload"`
	Reason     string       `json:"reason"`
	Revoked    *pkg.Subject `json:"revoked,omitempty"`
}

// revokedStart refuses (governance) the operator's start of an instance
// the controller placed when this node's revocation list revokes its
// package id, its manifest hash, or (its package directory verified
// again) its signer or an artifact: a revoked workload is started nowhere,
// while stop and unload stay possible. The refusal is chained (plane.refuse,
// phase start, with the subject). ok is false when the start may go on
// (not the controller's instance, or nothing of it revoked): the
// dispatcher's verb serves it.
func (b *operatorBackend) revokedStart(ctx context.Context, req dispatch.OperatorRequest) (dispatch.OperatorResponse, bool) {
	ref := req.Args.Instance
	if ref == "" || b.ctrl.disp.rev == nil {
		return dispatch.OperatorResponse{}, false
	}
	// start NODE INSTANCE names the node; start ID names the placement by
	// its instance id or its decision id.
	node := ""
	if req.Node != "" {
		var ok bool
		if node, ok = b.n.resolveRef(req.Node); !ok {
			return dispatch.OperatorResponse{}, false
		}
	}
	var pl *plane.Placement
	for _, p := range b.ctrl.c.Placements() {
		if node != "" && (p.InstanceID != ref || p.Node != node) {
			continue
		}
		if node == "" && p.InstanceID != ref && p.DecisionID != ref {
			continue
		}
		pl = &p
		break
	}
	if pl == nil {
		return dispatch.OperatorResponse{}, false
	}
	// The package id and manifest hash the placement records; the
	// signers and file hashes from its package directory, if it is still
	// there (else the host's own check stands).
	err := b.ctrl.disp.rev.Check(&pkg.Manifest{ID: pl.Package}, pl.ManifestHash)
	if err == nil && pl.Order != nil && pl.Order.PackageDir != "" {
		if _, verr := b.ctrl.disp.VerifyPackage(ctx, pl.Order.PackageDir); pkg.ErrorCode(verr) == pkg.CodeRevoked {
			err = verr
		}
	}
	if err == nil {
		return dispatch.OperatorResponse{}, false
	}
	rec := startRefusal{Phase: "start", DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node,
		Workload: pl.Workload, Reason: err.Error()}
	if ve, isVE := errors.AsType[*pkg.VerifyError](err); isVE {
		rec.Revoked = ve.Subject
	}
	if _, cerr := b.n.chain.Append(plane.ChainSource, plane.KindRefuse, rec); cerr != nil {
		return dispatch.OperatorResponse{Class: dispatch.ClassError, Code: dispatch.CodeInternal, Reason: "start refused, and not chained: " + cerr.Error()}, true
	}
	return dispatch.OperatorResponse{Class: dispatch.ClassRefused, Code: string(ctl.CodeGovernance), Node: pl.Node,
		Reason: "start of " + pl.InstanceID + " refused: " + err.Error()}, true
}
