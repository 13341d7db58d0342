package dispatch

// The dispatcher's operator verbs: it is the operator socket's backend
// (operator.Backend) for every per-node verb.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/pkg"
)

var _ operator.Backend = (*Dispatcher)(nil)

// Verbs returns the verbs the Dispatcher serves (operator.Backend).
func (d *Dispatcher) Verbs() []string {
	return []string{operator.VerbDescribe, operator.VerbPlace, operator.VerbStart, operator.VerbStop, operator.VerbUnload, operator.VerbStatus, operator.VerbLogs, operator.VerbRevoke, operator.VerbUnrevoke}
}

// Operate runs one operator request and classifies its outcome
// (operator.Backend). It is what the socket serves, exported for
// in-process callers and tests.
func (d *Dispatcher) Operate(ctx context.Context, req operator.Request) operator.Response {
	bad := func(format string, args ...any) operator.Response {
		return operator.Response{Class: operator.ClassError, Code: operator.CodeBadRequest, Reason: fmt.Sprintf(format, args...)}
	}
	if req.Node == "" {
		return bad("no node")
	}
	a := req.Args
	var (
		ans *ctl.Answer
		err error
	)
	switch req.Verb {
	case operator.VerbDescribe:
		ans, err = d.Call(ctx, req.Node, ctl.MethodDescribe, nil)
	case operator.VerbPlace:
		if a.PackageDir == "" {
			return bad("place needs a package directory")
		}
		variant := a.Variant
		if variant == "" {
			if variant, err = firstVariant(a.PackageDir); err != nil {
				return classify(nil, err)
			}
		}
		ans, err = d.Place(ctx, req.Node, a.PackageDir, variant, !a.NoStart)
	case operator.VerbStart, operator.VerbStop, operator.VerbUnload, operator.VerbLogs:
		if a.Instance == "" {
			return bad("%s needs an instance", req.Verb)
		}
		p := ctl.InstanceParams{InstanceID: a.Instance}
		if req.Verb == operator.VerbStop {
			p.GraceMS = a.GraceMS
		}
		ans, err = d.Call(ctx, req.Node, ctl.Method("workload."+req.Verb), p)
	case operator.VerbStatus:
		p := ctl.InstanceParams{InstanceID: a.Instance, IncludeDeparted: a.Departed && a.Instance == ""}
		ans, err = d.Call(ctx, req.Node, ctl.MethodStatus, p)
	case operator.VerbRevoke, operator.VerbUnrevoke:
		return d.revoke(ctx, req)
	default:
		return bad("unknown verb %q", req.Verb)
	}
	return classify(ans, err)
}

// firstVariant reads the package's manifest for its first variant. The
// manifest is verified again by Place before anything is sent.
func firstVariant(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("package directory %q is not absolute: %w", dir, ErrBadPackage)
	}
	b, err := atomicfile.ReadBounded(filepath.Join(dir, pkg.ManifestFile), pkg.MaxManifestBytes)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadPackage, err)
	}
	m, err := pkg.ParseManifest(b)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadPackage, err)
	}
	return m.Variants[0].Name, nil
}

// classify turns a call's outcome into a response.
func classify(ans *ctl.Answer, err error) operator.Response {
	if err == nil {
		return operator.Response{OK: true, Class: operator.ClassOK, Node: ans.Response.Responder,
			DecisionID: ans.Request.DecisionID, Result: ans.Response.Result}
	}
	if ce, ok := errors.AsType[*ctl.CallError](err); ok {
		switch ce.Class {
		case ctl.ClassRefused:
			return operator.Response{Class: operator.ClassRefused, Code: string(ce.Refusal.Code), Reason: ce.Refusal.Reason}
		case ctl.ClassIndeterminate:
			return operator.Response{Class: operator.ClassIndeterminate, Reason: ce.Err.Error()}
		default:
			return operator.Response{Class: operator.ClassUnreachable, Reason: ce.Err.Error()}
		}
	}
	if errors.Is(err, ErrBadPackage) {
		code := operator.CodeBadPackage
		if c := pkg.ErrorCode(err); c != "" {
			code = c
		}
		return operator.Response{Class: operator.ClassError, Code: code, Reason: err.Error()}
	}
	if errors.Is(err, ctl.ErrInvalidCall) {
		return operator.Response{Class: operator.ClassError, Code: operator.CodeBadRequest, Reason: err.Error()}
	}
	return operator.Response{Class: operator.ClassError, Code: operator.CodeInternal, Reason: err.Error()}
}

// RevokeResult is the result of revoke and unrevoke.
type RevokeResult struct {
	Subject pkg.Subject `json:"subject"`
	// Changed is false when the list already said so.
	Changed bool `json:"changed"`
	// NoticeSeq is the sequence number of the signed notice sent (Notify).
	NoticeSeq uint64 `json:"notice_seq,omitempty"`
}

// revoke edits this node's revocation list for the operator, chaining the
// operator's request first (a revocation that cannot be recorded is not
// made).
func (d *Dispatcher) revoke(ctx context.Context, req operator.Request) operator.Response {
	bad := func(format string, args ...any) operator.Response {
		return operator.Response{Class: operator.ClassError, Code: operator.CodeBadRequest, Reason: fmt.Sprintf(format, args...)}
	}
	if req.Node != config.SelfRef {
		return bad("%s applies to this node only (node %q)", req.Verb, config.SelfRef)
	}
	if d.rev == nil && !req.Args.Notify {
		return operator.Response{Class: operator.ClassError, Code: operator.CodeInternal, Reason: "this node keeps no revocation list"}
	}
	if req.Args.Notify && d.notices == nil {
		return operator.Response{Class: operator.ClassError, Code: operator.CodeInternal, Reason: "this node sends no revocation notices (no workload host)"}
	}
	s := req.Args.Subject
	if s == nil {
		return bad("%s needs a subject", req.Verb)
	}
	sub := pkg.Subject{Kind: s.Kind, Value: s.Value, Reason: s.Reason, At: d.now(), By: "operator"}
	if err := sub.Validate(); err != nil {
		return bad("%v", err)
	}
	if _, err := d.chain.Append(AuditSource, "dispatch."+req.Verb, map[string]any{
		"kind": sub.Kind, "value": sub.Value, "reason": sub.Reason, "notify": req.Args.Notify,
	}); err != nil {
		return operator.Response{Class: operator.ClassError, Code: operator.CodeInternal, Reason: "chain the revocation: " + err.Error()}
	}
	if req.Args.Notify {
		action := pkg.NoticeRevoke
		if req.Verb == operator.VerbUnrevoke {
			action = pkg.NoticeUnrevoke
		}
		seq, err := d.notifyRevoke(ctx, action, sub)
		if err != nil {
			return operator.Response{Class: operator.ClassError, Code: operator.CodeInternal, Reason: "revocation notice: " + err.Error()}
		}
		res, _ := json.Marshal(RevokeResult{Subject: sub, Changed: true, NoticeSeq: seq})
		return operator.Response{OK: true, Class: operator.ClassOK, Node: d.id.ID(), Result: res}
	}
	var changed bool
	var err error
	if req.Verb == operator.VerbRevoke {
		changed, err = d.rev.Revoke(sub)
	} else {
		changed, err = d.rev.Unrevoke(sub.Kind, sub.Value)
	}
	if err != nil {
		return operator.Response{Class: operator.ClassError, Code: operator.CodeInternal, Reason: err.Error()}
	}
	res, _ := json.Marshal(RevokeResult{Subject: sub, Changed: changed})
	return operator.Response{OK: true, Class: operator.ClassOK, Node: d.id.ID(), Result: res}
}
