package main

// The operator socket's backend: the dispatcher's per-node verbs, and the
// controller's (a place that lets the engine choose, explain, placements,
// nodes) when this node runs one.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
)

// The controller's operator verbs, besides dispatch.VerbPlace.
const (
	verbExplain    = "explain"
	verbPlacements = "placements"
	verbNodes      = "nodes"
)

// Refusal codes of the controller's place.
const (
	// codeUnplaceable: the engine found no eligible node (or the pinned
	// one is not eligible); the explanation says why.
	codeUnplaceable = "unplaceable"
	// codeNoController: the verb or argument needs a controller, and this
	// node runs none.
	codeNoController = "no_controller"
	// codeUnknownDecision: explain names no decision this node knows.
	codeUnknownDecision = "unknown_decision"
	// codeUnknownPlacement: start ID names no placement of the controller.
	codeUnknownPlacement = "unknown_placement"
	// codeNotStartable: the placement has no instance to start (lost,
	// replaced, retiring), or its node's tier no longer admits its kind.
	codeNotStartable = "not_startable"
)

// operatorBackend serves the operator socket: the controller's verbs when
// this node runs a controller (ctrl is not nil), and every other request
// through the dispatcher, whose verbs it leaves as they are. Without a
// controller a place that names a node goes straight to the dispatcher,
// as it always did.
type operatorBackend struct {
	d    *dispatch.Dispatcher
	ctrl *controllerRunner // nil: no controller
	n    *node
}

var _ dispatch.OperatorBackend = (*operatorBackend)(nil)

// Verbs returns the dispatcher's verbs and the controller's.
func (b *operatorBackend) Verbs() []string {
	return append(b.d.Verbs(), verbExplain, verbPlacements, verbNodes, verbWorkloads)
}

// Operate serves one request.
func (b *operatorBackend) Operate(ctx context.Context, req dispatch.OperatorRequest) dispatch.OperatorResponse {
	a := req.Args
	controllerOnly := func(what string) dispatch.OperatorResponse {
		return dispatch.OperatorResponse{Class: dispatch.ClassError, Code: codeNoController,
			Reason: what + " needs a controller, and this node runs none (controller.enabled: false)"}
	}
	switch req.Verb {
	case dispatch.VerbPlace:
		if b.ctrl != nil {
			return b.place(ctx, req)
		}
		switch {
		case req.Node == "":
			return controllerOnly("place without a node (the engine chooses)")
		case a.DryRun:
			return controllerOnly("place --dry-run")
		case len(a.Prefer) > 0 || len(a.Avoid) > 0:
			return controllerOnly("place --prefer or --avoid")
		case a.AllowEmulated:
			return controllerOnly("place --allow-emulated")
		case a.Package != "":
			return controllerOnly("place by package id")
		}
	case dispatch.VerbStart, dispatch.VerbStop, dispatch.VerbUnload:
		if b.ctrl != nil {
			if resp, ok := b.instanceVerb(ctx, req); ok {
				return resp
			}
		}
		if req.Node == "" {
			// start ID names a placement, not a node's instance.
			return controllerOnly(req.Verb + " without a node (of an instance the controller placed)")
		}
	case verbExplain, verbPlacements, verbNodes, verbWorkloads:
		if b.ctrl == nil {
			return controllerOnly(req.Verb)
		}
		switch req.Verb {
		case verbExplain:
			return b.explain(a.DecisionID)
		case verbPlacements:
			return okResult(b.n.id.ID(), placementDocs(b.ctrl.c.Placements()))
		case verbWorkloads:
			return okResult(b.n.id.ID(), workloadDocs(b.ctrl.c.Declarations()))
		default:
			return okResult(b.n.id.ID(), b.nodeDocs())
		}
	}
	return b.d.Operate(ctx, req)
}

func badRequest(format string, args ...any) dispatch.OperatorResponse {
	return dispatch.OperatorResponse{Class: dispatch.ClassError, Code: dispatch.CodeBadRequest, Reason: fmt.Sprintf(format, args...)}
}

// okResult answers ok with v as the result.
func okResult(node string, v any) dispatch.OperatorResponse {
	raw, err := json.Marshal(v)
	if err != nil {
		return dispatch.OperatorResponse{Class: dispatch.ClassError, Code: dispatch.CodeInternal, Reason: "result not encodable"}
	}
	return dispatch.OperatorResponse{OK: true, Class: dispatch.ClassOK, Node: node, Result: raw}
}

// controllerPlaceResult is the result of a place through the controller,
// whatever its outcome (it comes with refusals too, so the operator sees
// why).
type controllerPlaceResult struct {
	DecisionID string `json:"decision_id"`
	// Outcome is placed, dry_run, unplaceable, unsettled or failed.
	Outcome    string       `json:"outcome"`
	Node       string       `json:"node,omitempty"`
	Variant    string       `json:"variant,omitempty"`
	InstanceID string       `json:"instance_id,omitempty"`
	HostState  string       `json:"host_state,omitempty"`
	Attempts   []attemptDoc `json:"attempts"`
	// Explain is the engine's explanation with the decision id and one
	// line per place call.
	Explain string `json:"explain"`
}

// attemptDoc is one place call of a decision.
type attemptDoc struct {
	Node    string `json:"node"`
	Variant string `json:"variant"`
	Outcome string `json:"outcome"`
	Code    string `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// place runs a place through the controller: pinned to the node named,
// or wherever the engine chooses.
func (b *operatorBackend) place(ctx context.Context, req dispatch.OperatorRequest) dispatch.OperatorResponse {
	a := req.Args
	o := plane.Order{Start: !a.NoStart, DryRun: a.DryRun, Variant: a.Variant, AllowEmulated: a.AllowEmulated}
	switch {
	case a.PackageDir != "" && a.Package != "":
		return badRequest("place takes a package directory or a package id, not both")
	case a.PackageDir != "":
		o.PackageDir = a.PackageDir
	case a.Package != "":
		// A package id comes from the controller's package store.
		id, version, _ := strings.Cut(a.Package, "@")
		dir, _, err := b.ctrl.store.Resolve(id, version)
		if err != nil {
			return dispatch.OperatorResponse{Class: dispatch.ClassError, Code: dispatch.CodeBadPackage,
				Reason: fmt.Sprintf("place %s: %v (nodeld package add stores a package)", a.Package, err)}
		}
		o.PackageDir = dir
	default:
		return badRequest("place needs a package directory or a package id")
	}
	resolve := func(what, ref string) (string, *dispatch.OperatorResponse) {
		id, ok := b.n.resolveRef(ref)
		if !ok {
			r := dispatch.OperatorResponse{Class: dispatch.ClassUnreachable,
				Reason: fmt.Sprintf("%s %q: %v", what, ref, dispatch.ErrUnknownNode)}
			return "", &r
		}
		return id, nil
	}
	var bad *dispatch.OperatorResponse
	if req.Node != "" {
		if o.Pin, bad = resolve("node", req.Node); bad != nil {
			return *bad
		}
	}
	for _, ref := range a.Prefer {
		id, bad := resolve("--prefer", ref)
		if bad != nil {
			return *bad
		}
		o.Prefer = append(o.Prefer, id)
	}
	for _, ref := range a.Avoid {
		id, bad := resolve("--avoid", ref)
		if bad != nil {
			return *bad
		}
		o.Avoid = append(o.Avoid, id)
	}
	rep, err := b.ctrl.c.Place(ctx, o)
	if err != nil && rep.DecisionID == "" {
		if errors.Is(err, plane.ErrNoPackage) {
			code := dispatch.CodeBadPackage
			if c := pkg.ErrorCode(err); c != "" {
				code = c
			}
			return dispatch.OperatorResponse{Class: dispatch.ClassError, Code: code, Reason: err.Error()}
		}
		// The engine refused the request (an unknown pin, an invalid
		// request), chained as a refusal; or the decision could not be
		// chained, and nothing was done.
		return dispatch.OperatorResponse{Class: dispatch.ClassRefused, Code: codeUnplaceable, Reason: err.Error()}
	}
	res := controllerPlaceResult{DecisionID: rep.DecisionID, Explain: rep.Explain(), Attempts: []attemptDoc{}}
	for _, at := range rep.Attempts {
		res.Attempts = append(res.Attempts, attemptDoc{Node: at.Node, Variant: at.Variant, Outcome: at.Outcome, Code: string(at.Code), Reason: at.Reason})
	}
	resp := okResult(b.n.id.ID(), nil)
	resp.DecisionID = rep.DecisionID
	switch {
	case err != nil:
		res.Outcome = "failed"
		resp = dispatch.OperatorResponse{Class: dispatch.ClassError, Code: dispatch.CodeInternal, Reason: err.Error()}
	case o.DryRun:
		res.Outcome = "dry_run"
		if c := rep.Decision.Chosen; c != nil {
			res.Node, res.Variant = c.Node, c.Variant
		}
	case rep.Placed != nil:
		res.Outcome = "placed"
		res.Node, res.Variant, res.InstanceID, res.HostState = rep.Placed.Node, rep.Placed.Variant, rep.Placed.InstanceID, rep.Placed.HostState
		resp.Node = rep.Placed.Node
	case rep.Unsettled:
		res.Outcome = "unsettled"
		resp = dispatch.OperatorResponse{Class: dispatch.ClassIndeterminate,
			Reason: "the place went without an answer and the node could not say whether it holds the instance; the controller settles it on a later tick (nodeld ctl placements)"}
	case rep.Governance != "":
		// The policy denied it: no node was asked.
		res.Outcome = string(ctl.CodeGovernance)
		resp = dispatch.OperatorResponse{Class: dispatch.ClassRefused, Code: string(ctl.CodeGovernance), Reason: rep.Governance}
	case rep.Decision.Chosen == nil:
		res.Outcome = codeUnplaceable
		resp = dispatch.OperatorResponse{Class: dispatch.ClassRefused, Code: codeUnplaceable, Reason: "no eligible node (see the explanation)"}
	default:
		res.Outcome = "failed"
		last := rep.Attempts[len(rep.Attempts)-1]
		resp = dispatch.OperatorResponse{Reason: "every candidate refused or was unreachable; last: " + last.Reason}
		switch last.Outcome {
		case "refused":
			resp.Class, resp.Code = dispatch.ClassRefused, string(last.Code)
		case "unreachable":
			resp.Class = dispatch.ClassUnreachable
		default:
			resp.Class, resp.Code = dispatch.ClassError, dispatch.CodeInternal
		}
	}
	resp.DecisionID = rep.DecisionID
	raw, merr := json.Marshal(res)
	if merr == nil {
		resp.Result = raw
	}
	return resp
}

// instanceVerb starts, stops or unloads an instance the controller
// placed, through the controller, so that it records it (a stopped
// instance is not placed again when its node dies; one started again is
// watched and moved as usual; an unloaded one is forgotten). Without a
// node (start ID), the instance id or decision id names the placement.
// ok is false for an instance the controller did not place on the node
// named: the dispatcher's verb serves it, as on a node without a
// controller.
func (b *operatorBackend) instanceVerb(ctx context.Context, req dispatch.OperatorRequest) (dispatch.OperatorResponse, bool) {
	a := req.Args
	if a.Instance == "" {
		return dispatch.OperatorResponse{}, false
	}
	if req.Node != "" {
		node, ok := b.n.resolveRef(req.Node)
		if !ok {
			return dispatch.OperatorResponse{}, false
		}
		var mine bool
		for _, p := range b.ctrl.c.Placements() {
			if p.InstanceID == a.Instance && p.Node == node {
				mine = true
				break
			}
		}
		if !mine {
			return dispatch.OperatorResponse{}, false
		}
	}
	if a.GraceMS != 0 {
		return badRequest("%s --grace: the controller stops its instances with the host's default grace; leave --grace out", req.Verb), true
	}
	var (
		p   plane.Placement
		err error
	)
	switch req.Verb {
	case dispatch.VerbStart:
		p, err = b.ctrl.c.Start(ctx, a.Instance)
	case dispatch.VerbStop:
		p, err = b.ctrl.c.Stop(ctx, a.Instance)
	default:
		p, err = b.ctrl.c.Unload(ctx, a.Instance)
	}
	if err != nil {
		var ce *ctl.CallError
		switch {
		case errors.Is(err, plane.ErrUnknownPlacement):
			return dispatch.OperatorResponse{Class: dispatch.ClassError, Code: codeUnknownPlacement, Reason: err.Error()}, true
		case errors.Is(err, plane.ErrAmbiguousPlacement):
			return badRequest("%v", err), true
		case errors.Is(err, plane.ErrStartRevoked):
			// Refused by the controller's revocation list (chained).
			return dispatch.OperatorResponse{Class: dispatch.ClassRefused, Code: string(ctl.CodeGovernance), Node: p.Node, Reason: err.Error()}, true
		case errors.Is(err, plane.ErrNotStartable):
			return dispatch.OperatorResponse{Class: dispatch.ClassRefused, Code: codeNotStartable, Reason: err.Error()}, true
		case errors.Is(err, plane.ErrPlacementBusy):
			return dispatch.OperatorResponse{Class: dispatch.ClassError, Code: dispatch.CodeBusy, Reason: err.Error()}, true
		case errors.As(err, &ce) && ce.Class == ctl.ClassRefused && ce.Refusal != nil:
			return dispatch.OperatorResponse{Class: dispatch.ClassRefused, Code: string(ce.Refusal.Code), Reason: ce.Refusal.Reason}, true
		case errors.As(err, &ce) && ce.Class == ctl.ClassIndeterminate:
			return dispatch.OperatorResponse{Class: dispatch.ClassIndeterminate, Reason: err.Error()}, true
		case errors.As(err, &ce):
			return dispatch.OperatorResponse{Class: dispatch.ClassUnreachable, Reason: err.Error()}, true
		}
		return dispatch.OperatorResponse{Class: dispatch.ClassError, Code: dispatch.CodeInternal, Reason: err.Error()}, true
	}
	resp := okResult(p.Node, placementDoc(p))
	resp.DecisionID = p.DecisionID
	return resp, true
}

// explainResult is the result of explain.
type explainResult struct {
	DecisionID string `json:"decision_id"`
	// Source is "recent" (the report of a decision made since this
	// controller started: the engine's full explanation), "chain" (an
	// older decision, rebuilt from its plane.decision entry and the
	// dispatch entries that follow it) or "placement" (a decision that
	// still names a placement but is not in the chain file any more:
	// what the state file keeps of it).
	Source  string        `json:"source"`
	Explain string        `json:"explain"`
	Placed  *placementDoc `json:"placement,omitempty"`
}

// explain explains a decision, named by its id or a unique prefix of it
// (at least minDecisionPrefix hex characters, as ctl placements shows).
func (b *operatorBackend) explain(ref string) dispatch.OperatorResponse {
	if !validDecisionRef(ref) {
		return badRequest("explain needs a decision id: %d to 64 lower-case hex characters", minDecisionPrefix)
	}
	placements := b.ctrl.c.Placements()
	seen := map[string]bool{}
	for _, p := range placements {
		seen[p.DecisionID] = true
	}
	for _, id := range b.ctrl.c.RecentIDs() {
		seen[id] = true
	}
	var matches []string
	for id := range seen {
		if strings.HasPrefix(id, ref) {
			matches = append(matches, id)
		}
	}
	if len(matches) > 1 {
		slices.Sort(matches)
		return badRequest("decision id prefix %s names %d decisions (%s): give more of it", ref, len(matches), strings.Join(matches, ", "))
	}
	id := ref
	if len(matches) == 1 {
		id = matches[0]
	}
	placed := func(id string) *placementDoc {
		for _, p := range placements {
			if p.DecisionID == id {
				d := placementDoc(p)
				return &d
			}
		}
		return nil
	}
	if rep, ok := b.ctrl.c.Recent(id); ok {
		return okResult(b.n.id.ID(), explainResult{DecisionID: id, Source: "recent", Explain: rep.Explain(), Placed: placed(id)})
	}
	// Older, or made before a restart: the audit chain has it (one read
	// of the chain file).
	ds, err := b.scanChain(id)
	switch {
	case err != nil:
		b.ctrl.log.Warn("explain: chain not read", zap.Error(err))
	case len(ds) > 1:
		ids := make([]string, len(ds))
		for i, d := range ds {
			ids[i] = d.ID
		}
		return badRequest("decision id prefix %s names %d decisions in the chain (%s): give more of it", ref, len(ds), strings.Join(ids, ", "))
	case len(ds) == 1:
		return okResult(b.n.id.ID(), explainResult{DecisionID: ds[0].ID, Source: "chain", Explain: ds[0].Explain, Placed: placed(ds[0].ID)})
	}
	if pd := placed(id); pd != nil {
		return okResult(b.n.id.ID(), explainResult{DecisionID: id, Source: "placement", Explain: pd.explain(), Placed: pd})
	}
	reason := fmt.Sprintf("decision %s: not among this controller's last %d decisions, its placements, nor the plane.decision entries of its chain", id, plane.MaxRecentReports)
	if err != nil {
		reason += " (chain not read: " + err.Error() + ")"
	}
	return dispatch.OperatorResponse{Class: dispatch.ClassError, Code: codeUnknownDecision, Reason: reason}
}

// scanChain finds the controller's decisions whose id starts with prefix
// in this node's chain file (plane.ScanDecisions: one read of the file).
func (b *operatorBackend) scanChain(prefix string) ([]plane.ChainedDecision, error) {
	if b.n.chain == nil {
		return nil, nil
	}
	f, err := os.Open(b.n.chain.Path())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return plane.ScanDecisions(f, prefix)
}

// placementDoc is a placement as the operator reads it: the controller's
// own record, as the state file keeps it.
type placementDoc plane.Placement

func placementDocs(ps []plane.Placement) []placementDoc {
	out := make([]placementDoc, len(ps))
	for i, p := range ps {
		out[i] = placementDoc(p)
	}
	return out
}

// explain renders what the state file keeps of a decision.
func (p placementDoc) explain() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "workload %s (kind %s): package %s %s\n", p.Workload, p.Kind, p.Package, p.Version)
	fmt.Fprintf(&sb, "placement: %s on %s via %s, instance %s", p.Life, p.Node, p.Variant, p.InstanceID)
	if p.HostState != "" {
		fmt.Fprintf(&sb, " (%s)", p.HostState)
	}
	sb.WriteByte('\n')
	if len(p.Candidates) > 0 {
		// Kept only while the decision is not settled.
		cands := make([]string, len(p.Candidates))
		for i, c := range p.Candidates {
			cands[i] = c.Node + " via " + c.Variant
		}
		fmt.Fprintf(&sb, "ranked candidates: %s\n", strings.Join(cands, ", "))
	}
	if p.Replaces != "" {
		fmt.Fprintf(&sb, "replaces: %s\n", p.Replaces)
	}
	if p.ReplacedBy != "" {
		fmt.Fprintf(&sb, "replaced by: %s\n", p.ReplacedBy)
	}
	if p.LostReason != "" {
		fmt.Fprintf(&sb, "lost: %s\n", p.LostReason)
	}
	if p.LastError != "" {
		fmt.Fprintf(&sb, "last error: %s\n", p.LastError)
	}
	fmt.Fprintf(&sb, "decision_id: %s\n(the engine's full explanation is kept for this controller's recent decisions only)\n", p.DecisionID)
	return sb.String()
}

// nodeDoc is one target as the operator reads it.
type nodeDoc struct {
	ID string `json:"id"`
	// Name is the peer's configured name, "self" for this node.
	Name      string  `json:"name,omitempty"`
	Tier      string  `json:"tier"`
	Liveness  string  `json:"liveness"`
	LastSeen  string  `json:"last_contact,omitempty"`
	FactsSeq  uint64  `json:"facts_seq,omitempty"`
	FactsAgeS float64 `json:"facts_age_seconds"`
	HasFacts  bool    `json:"has_facts"`
	MemFree   uint64  `json:"mem_free_bytes"`
	MemTotal  uint64  `json:"mem_total_bytes"`
	GPUs      int     `json:"gpus"`
	VRAMFree  uint64  `json:"vram_free_bytes"`
	VRAMTotal uint64  `json:"vram_total_bytes"`
	// Class is the node class its facts claim (node.class), "" when none.
	Class      string `json:"class,omitempty"`
	Instances  int    `json:"instances"`
	Placements int    `json:"placements"`
}

func (b *operatorBackend) nodeDocs() []nodeDoc {
	names := map[string]string{b.n.id.ID(): config.SelfRef}
	if b.n.mesh != nil {
		for _, p := range b.n.mesh.Status() {
			if p.ID != "" && p.Name != "" {
				names[p.ID] = p.Name
			}
		}
	}
	views := b.ctrl.c.NodeViews()
	out := make([]nodeDoc, 0, len(views))
	for _, v := range views {
		d := nodeDoc{
			ID: v.ID, Name: names[v.ID], Tier: v.Tier.String(), Liveness: v.Liveness.String(),
			FactsSeq: v.FactsSeq, FactsAgeS: v.FactsAge.Seconds(), HasFacts: v.HasFacts,
			MemFree: v.MemFreeBytes, MemTotal: v.MemTotalBytes, GPUs: v.GPUs,
			VRAMFree: v.VRAMFreeBytes, VRAMTotal: v.VRAMTotalBytes,
			Instances: v.Instances, Placements: v.Placements, Class: v.Class,
		}
		if !v.LastContact.IsZero() {
			d.LastSeen = v.LastContact.UTC().Format(time.RFC3339)
		}
		out = append(out, d)
	}
	slices.SortStableFunc(out, func(a, b nodeDoc) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// minDecisionPrefix is the shortest decision id prefix explain takes, as
// the instance verbs through the controller do.
const minDecisionPrefix = ctl.MinDecisionPrefix

// validDecisionRef reports whether ref is a decision id or a prefix of
// one that explain takes.
func validDecisionRef(ref string) bool { return ctl.ValidDecisionPrefix(ref) }

// packageRef splits a place argument that is a package id, "ID" or
// "ID@VERSION"; ok is false for anything else.
func packageRef(arg string) (string, bool) {
	id, version, hasVersion := strings.Cut(arg, "@")
	if !grammar.ValidName(id) || hasVersion && !grammar.ValidVersion(version) {
		return "", false
	}
	return arg, true
}
