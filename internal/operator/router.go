package operator

// The operator socket's router: the dispatcher's per-node verbs, and the
// controller's (a place that lets the engine choose, explain, placements,
// workloads, nodes) when this node runs one.

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
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
)

// The controller's operator verbs, besides VerbPlace.
const (
	VerbExplain    = "explain"
	VerbPlacements = "placements"
	VerbNodes      = "nodes"
	// VerbWorkloads lists the declared workloads (controller.workloads).
	VerbWorkloads = "workloads"
)

// ErrUnknownNode is wrapped for a node reference that names no admitted
// peer nor this node (dispatch.ErrUnknownNode is this error).
var ErrUnknownNode = errors.New("no admitted peer by that name or id")

// Refusal codes of the controller's place.
const (
	// CodeUnplaceable: the engine found no eligible node (or the pinned
	// one is not eligible); the explanation says why.
	CodeUnplaceable = "unplaceable"
	// CodeNoController: the verb or argument needs a controller, and this
	// node runs none.
	CodeNoController = "no_controller"
	// CodeUnknownDecision: explain names no decision this node knows.
	CodeUnknownDecision = "unknown_decision"
	// CodeUnknownPlacement: start ID names no placement of the controller.
	CodeUnknownPlacement = "unknown_placement"
	// CodeNotStartable: the placement has no instance to start (lost,
	// replaced, retiring), or its node's tier no longer admits its kind.
	CodeNotStartable = "not_startable"
)

// Router serves the operator socket: the controller's verbs when this
// node runs a controller, and every other request through the
// dispatcher, whose verbs it leaves as they are. Without a controller a
// place that names a node goes straight to the dispatcher, as it always
// did.
type Router struct {
	d Backend
	c Controller // nil: no controller
	// store is the controller's package store (place by package id).
	store     PackageStore
	nodeID    string
	resolve   func(ref string) (string, bool)
	peerNames func() map[string]string
	chainPath string
	log       *zap.Logger
	// fwd forwards a follower's writes to the leader; nil: never.
	fwd Forwarder
}

var _ Backend = (*Router)(nil)

// Controller is what the router asks of the controller (*plane.Controller).
type Controller interface {
	Place(ctx context.Context, o plane.Order) (plane.Report, error)
	Start(ctx context.Context, ref string) (plane.Placement, error)
	Stop(ctx context.Context, ref string) (plane.Placement, error)
	Unload(ctx context.Context, ref string) (plane.Placement, error)
	Placements() []plane.Placement
	Declarations() []plane.DeclarationView
	NodeViews() []plane.NodeView
	Recent(id string) (plane.Report, bool)
	RecentIDs() []string
	// Leadership is the controller's raft role, term and leader.
	Leadership() plane.LeaderInfo
}

var _ Controller = (*plane.Controller)(nil)

// PackageStore resolves a package id to its directory (*pkg.Store).
type PackageStore interface {
	Resolve(id, version string) (dir, resolved string, err error)
}

var _ PackageStore = (*pkg.Store)(nil)

// RouterDeps are what the router routes to.
type RouterDeps struct {
	// Dispatcher serves the per-node verbs (*dispatch.Dispatcher);
	// required.
	Dispatcher Backend
	// Controller serves the controller's verbs; nil when this node runs
	// none (they are then refused with CodeNoController).
	Controller Controller
	// Store is the controller's package store; required with Controller.
	Store PackageStore
	// NodeID is this node's id.
	NodeID string
	// ResolveNode resolves a node reference (config.ResolveNodeRef with
	// what the daemon knows) to a node id; ok is false for one it does not
	// know. Required with Controller.
	ResolveNode func(ref string) (nodeID string, ok bool)
	// PeerNames returns the configured names of the peers, by node id;
	// nil: none.
	PeerNames func() map[string]string
	// ChainPath is this node's chain file (explain reads older decisions
	// from it); "" reads none.
	ChainPath string
	// Logger; nil logs nothing.
	Logger *zap.Logger
	// Forwarder forwards the controller's writes (place by package id,
	// start, stop, unload) from a follower to the leader
	// (*ctlforward.Forwarder); nil: a follower refuses them naming the
	// leader.
	Forwarder Forwarder
}

// NewRouter returns the router of deps.
func NewRouter(deps RouterDeps) (*Router, error) {
	if deps.Dispatcher == nil {
		return nil, errors.New("operator router: no dispatcher")
	}
	if deps.Controller != nil && (deps.Store == nil || deps.ResolveNode == nil) {
		return nil, errors.New("operator router: a controller needs a package store and a node resolver")
	}
	r := &Router{d: deps.Dispatcher, c: deps.Controller, store: deps.Store, nodeID: deps.NodeID,
		resolve: deps.ResolveNode, peerNames: deps.PeerNames, chainPath: deps.ChainPath, log: deps.Logger, fwd: deps.Forwarder}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	if r.peerNames == nil {
		r.peerNames = func() map[string]string { return nil }
	}
	return r, nil
}

// Verbs returns the dispatcher's verbs and the controller's.
func (b *Router) Verbs() []string {
	return append(b.d.Verbs(), VerbExplain, VerbPlacements, VerbNodes, VerbWorkloads)
}

// Operate serves one request.
func (b *Router) Operate(ctx context.Context, req Request) Response { return b.operate(ctx, req, "") }

// operate serves one request; from is the follower that forwarded it to
// this controller, "" for a request of this node's socket.
func (b *Router) operate(ctx context.Context, req Request, from string) Response {
	a := req.Args
	controllerOnly := func(what string) Response {
		return Response{Class: ClassError, Code: CodeNoController,
			Reason: what + " needs a controller, and this node runs none (controller.enabled: false)"}
	}
	switch req.Verb {
	case VerbPlace:
		if b.c != nil {
			return b.place(ctx, req, from)
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
	case VerbStart, VerbStop, VerbUnload:
		if b.c != nil {
			if resp, ok := b.instanceVerb(ctx, req, from); ok {
				return resp
			}
		}
		if from != "" {
			// Never the dispatcher's verb for a forwarded request: a
			// follower forwards only its controller's placements.
			return Response{Class: ClassError, Code: CodeUnknownPlacement,
				Reason: fmt.Sprintf("%s %s: no placement of this controller by that instance on that node", req.Verb, a.Instance)}
		}
		if req.Node == "" {
			// start ID names a placement, not a node's instance.
			return controllerOnly(req.Verb + " without a node (of an instance the controller placed)")
		}
	case VerbExplain, VerbPlacements, VerbNodes, VerbWorkloads:
		if b.c == nil {
			return controllerOnly(req.Verb)
		}
		switch req.Verb {
		case VerbExplain:
			return b.explain(a.DecisionID)
		case VerbPlacements:
			return okResult(b.nodeID, PlacementDocs(b.c.Placements()))
		case VerbWorkloads:
			return okResult(b.nodeID, WorkloadDocs(b.c.Declarations()))
		default:
			return okResult(b.nodeID, b.nodeDocs())
		}
	}
	return b.d.Operate(ctx, req)
}

func badRequest(format string, args ...any) Response {
	return Response{Class: ClassError, Code: CodeBadRequest, Reason: fmt.Sprintf(format, args...)}
}

// okResult answers ok with v as the result.
func okResult(node string, v any) Response {
	raw, err := json.Marshal(v)
	if err != nil {
		return Response{Class: ClassError, Code: CodeInternal, Reason: "result not encodable"}
	}
	return Response{OK: true, Class: ClassOK, Node: node, Result: raw}
}

// PlaceResult is the result of a place through the controller,
// whatever its outcome (it comes with refusals too, so the operator sees
// why).
type PlaceResult struct {
	DecisionID string `json:"decision_id"`
	// Outcome is placed, dry_run, unplaceable, unsettled or failed.
	Outcome    string       `json:"outcome"`
	Node       string       `json:"node,omitempty"`
	Variant    string       `json:"variant,omitempty"`
	InstanceID string       `json:"instance_id,omitempty"`
	HostState  string       `json:"host_state,omitempty"`
	Attempts   []AttemptDoc `json:"attempts"`
	// Explain is the engine's explanation with the decision id and one
	// line per place call.
	Explain string `json:"explain"`
}

// AttemptDoc is one place call of a decision.
type AttemptDoc struct {
	Node    string `json:"node"`
	Variant string `json:"variant"`
	Outcome string `json:"outcome"`
	Code    string `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// place runs a place through the controller: pinned to the node named,
// or wherever the engine chooses.
func (b *Router) place(ctx context.Context, req Request, from string) Response {
	if resp, ok := b.toLeader(ctx, req, from); ok {
		return resp
	}
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
		dir, _, err := b.store.Resolve(id, version)
		if err != nil {
			return Response{Class: ClassError, Code: CodeBadPackage,
				Reason: fmt.Sprintf("place %s: %v (nodeld package add stores a package)", a.Package, err)}
		}
		o.PackageDir = dir
	default:
		return badRequest("place needs a package directory or a package id")
	}
	resolve := func(what, ref string) (string, *Response) {
		id, ok := b.resolve(ref)
		if !ok {
			r := Response{Class: ClassUnreachable,
				Reason: fmt.Sprintf("%s %q: %v", what, ref, ErrUnknownNode)}
			return "", &r
		}
		return id, nil
	}
	var bad *Response
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
	rep, err := b.c.Place(ctx, o)
	var nl *plane.NotLeaderError
	if errors.As(err, &nl) && rep.DecisionID == "" {
		// It lost the lead since toLeader asked.
		return b.redirect(ctx, req, from, nl.Leader)
	}
	if err != nil && rep.DecisionID == "" {
		if errors.Is(err, plane.ErrNoPackage) {
			code := CodeBadPackage
			if c := pkg.ErrorCode(err); c != "" {
				code = c
			}
			return Response{Class: ClassError, Code: code, Reason: err.Error()}
		}
		// The engine refused the request (an unknown pin, an invalid
		// request), chained as a refusal; or the decision could not be
		// chained, and nothing was done.
		return Response{Class: ClassRefused, Code: CodeUnplaceable, Reason: err.Error()}
	}
	res := PlaceResult{DecisionID: rep.DecisionID, Explain: rep.Explain(), Attempts: []AttemptDoc{}}
	for _, at := range rep.Attempts {
		res.Attempts = append(res.Attempts, AttemptDoc{Node: at.Node, Variant: at.Variant, Outcome: at.Outcome, Code: string(at.Code), Reason: at.Reason})
	}
	resp := okResult(b.nodeID, nil)
	resp.DecisionID = rep.DecisionID
	switch {
	case err != nil:
		res.Outcome = "failed"
		resp = Response{Class: ClassError, Code: CodeInternal, Reason: err.Error()}
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
		resp = Response{Class: ClassIndeterminate,
			Reason: "the place went without an answer and the node could not say whether it holds the instance; the controller settles it on a later tick (nodeld ctl placements)"}
	case rep.Governance != "":
		// The policy denied it: no node was asked.
		res.Outcome = string(ctl.CodeGovernance)
		resp = Response{Class: ClassRefused, Code: string(ctl.CodeGovernance), Reason: rep.Governance}
	case rep.Decision.Chosen == nil:
		res.Outcome = CodeUnplaceable
		resp = Response{Class: ClassRefused, Code: CodeUnplaceable, Reason: "no eligible node (see the explanation)"}
	default:
		res.Outcome = "failed"
		last := rep.Attempts[len(rep.Attempts)-1]
		resp = Response{Reason: "every candidate refused or was unreachable; last: " + last.Reason}
		switch last.Outcome {
		case "refused":
			resp.Class, resp.Code = ClassRefused, string(last.Code)
		case "unreachable":
			resp.Class = ClassUnreachable
		default:
			resp.Class, resp.Code = ClassError, CodeInternal
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
func (b *Router) instanceVerb(ctx context.Context, req Request, from string) (Response, bool) {
	a := req.Args
	if a.Instance == "" {
		return Response{}, false
	}
	if req.Node != "" {
		node, ok := b.resolve(req.Node)
		if !ok {
			return Response{}, false
		}
		var mine bool
		for _, p := range b.c.Placements() {
			if p.InstanceID == a.Instance && p.Node == node {
				mine = true
				break
			}
		}
		if !mine {
			return Response{}, false
		}
	}
	if a.GraceMS != 0 {
		return badRequest("%s --grace: the controller stops its instances with the host's default grace; leave --grace out", req.Verb), true
	}
	if resp, ok := b.toLeader(ctx, req, from); ok {
		return resp, true
	}
	var (
		p   plane.Placement
		err error
	)
	switch req.Verb {
	case VerbStart:
		p, err = b.c.Start(ctx, a.Instance)
	case VerbStop:
		p, err = b.c.Stop(ctx, a.Instance)
	default:
		p, err = b.c.Unload(ctx, a.Instance)
	}
	if err != nil {
		var (
			ce *ctl.CallError
			nl *plane.NotLeaderError
		)
		switch {
		case errors.As(err, &nl):
			return b.redirect(ctx, req, from, nl.Leader), true
		case errors.Is(err, plane.ErrUnknownPlacement):
			return Response{Class: ClassError, Code: CodeUnknownPlacement, Reason: err.Error()}, true
		case errors.Is(err, plane.ErrAmbiguousPlacement):
			return badRequest("%v", err), true
		case errors.Is(err, plane.ErrStartRevoked):
			// Refused by the controller's revocation list (chained).
			return Response{Class: ClassRefused, Code: string(ctl.CodeGovernance), Node: p.Node, Reason: err.Error()}, true
		case errors.Is(err, plane.ErrNotStartable):
			return Response{Class: ClassRefused, Code: CodeNotStartable, Reason: err.Error()}, true
		case errors.Is(err, plane.ErrPlacementBusy):
			return Response{Class: ClassError, Code: CodeBusy, Reason: err.Error()}, true
		case errors.As(err, &ce) && ce.Class == ctl.ClassRefused && ce.Refusal != nil:
			return Response{Class: ClassRefused, Code: string(ce.Refusal.Code), Reason: ce.Refusal.Reason}, true
		case errors.As(err, &ce) && ce.Class == ctl.ClassIndeterminate:
			return Response{Class: ClassIndeterminate, Reason: err.Error()}, true
		case errors.As(err, &ce):
			return Response{Class: ClassUnreachable, Reason: err.Error()}, true
		}
		return Response{Class: ClassError, Code: CodeInternal, Reason: err.Error()}, true
	}
	resp := okResult(p.Node, PlacementDoc(p))
	resp.DecisionID = p.DecisionID
	return resp, true
}

// ExplainResult is the result of explain.
type ExplainResult struct {
	DecisionID string `json:"decision_id"`
	// Source is "recent" (the report of a decision made since this
	// controller started: the engine's full explanation), "chain" (an
	// older decision, rebuilt from its plane.decision entry and the
	// dispatch entries that follow it) or "placement" (a decision that
	// still names a placement but is not in the chain file any more:
	// what the state file keeps of it).
	Source  string        `json:"source"`
	Explain string        `json:"explain"`
	Placed  *PlacementDoc `json:"placement,omitempty"`
}

// explain explains a decision, named by its id or a unique prefix of it
// (at least minDecisionPrefix hex characters, as ctl placements shows).
func (b *Router) explain(ref string) Response {
	if !validDecisionRef(ref) {
		return badRequest("explain needs a decision id: %d to 64 lower-case hex characters", minDecisionPrefix)
	}
	placements := b.c.Placements()
	seen := map[string]bool{}
	for _, p := range placements {
		seen[p.DecisionID] = true
	}
	for _, id := range b.c.RecentIDs() {
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
	placed := func(id string) *PlacementDoc {
		for _, p := range placements {
			if p.DecisionID == id {
				d := PlacementDoc(p)
				return &d
			}
		}
		return nil
	}
	if rep, ok := b.c.Recent(id); ok {
		return okResult(b.nodeID, ExplainResult{DecisionID: id, Source: "recent", Explain: rep.Explain(), Placed: placed(id)})
	}
	// Older, or made before a restart: the audit chain has it (one read
	// of the chain file).
	ds, err := b.scanChain(id)
	switch {
	case err != nil:
		b.log.Warn("explain: chain not read", zap.Error(err))
	case len(ds) > 1:
		ids := make([]string, len(ds))
		for i, d := range ds {
			ids[i] = d.ID
		}
		return badRequest("decision id prefix %s names %d decisions in the chain (%s): give more of it", ref, len(ds), strings.Join(ids, ", "))
	case len(ds) == 1:
		return okResult(b.nodeID, ExplainResult{DecisionID: ds[0].ID, Source: "chain", Explain: ds[0].Explain, Placed: placed(ds[0].ID)})
	}
	if pd := placed(id); pd != nil {
		return okResult(b.nodeID, ExplainResult{DecisionID: id, Source: "placement", Explain: pd.explain(), Placed: pd})
	}
	reason := fmt.Sprintf("decision %s: not among this controller's last %d decisions, its placements, nor the plane.decision entries of its chain", id, plane.MaxRecentReports)
	if err != nil {
		reason += " (chain not read: " + err.Error() + ")"
	}
	return Response{Class: ClassError, Code: CodeUnknownDecision, Reason: reason}
}

// scanChain finds the controller's decisions whose id starts with prefix
// in this node's chain file (plane.ScanDecisions: one read of the file).
func (b *Router) scanChain(prefix string) ([]plane.ChainedDecision, error) {
	if b.chainPath == "" {
		return nil, nil
	}
	f, err := os.Open(b.chainPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return plane.ScanDecisions(f, prefix)
}

// PlacementDoc is a placement as the operator reads it: the controller's
// own record, as the state file keeps it.
type PlacementDoc plane.Placement

func PlacementDocs(ps []plane.Placement) []PlacementDoc {
	out := make([]PlacementDoc, len(ps))
	for i, p := range ps {
		out[i] = PlacementDoc(p)
	}
	return out
}

// explain renders what the state file keeps of a decision.
func (p PlacementDoc) explain() string {
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

// NodeDoc is one target as the operator reads it.
type NodeDoc struct {
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

func (b *Router) nodeDocs() []NodeDoc {
	names := map[string]string{b.nodeID: config.SelfRef}
	for id, name := range b.peerNames() {
		if id != "" && name != "" {
			names[id] = name
		}
	}
	views := b.c.NodeViews()
	out := make([]NodeDoc, 0, len(views))
	for _, v := range views {
		d := NodeDoc{
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
	slices.SortStableFunc(out, func(a, b NodeDoc) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// minDecisionPrefix is the shortest decision id prefix explain takes, as
// the instance verbs through the controller do.
const minDecisionPrefix = ctl.MinDecisionPrefix

// validDecisionRef reports whether ref is a decision id or a prefix of
// one that explain takes.
func validDecisionRef(ref string) bool { return ctl.ValidDecisionPrefix(ref) }
