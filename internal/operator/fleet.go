package operator

// The fleet page's read model: the controller's nodes, placements,
// declarations and recent decisions in one document, read from the same
// sources as nodeld ctl nodes, placements, workloads and explain.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/plane"
)

// Bounds of the fleet document, so that a large fleet gives a page of
// bounded size (each list says how many it left out).
const (
	// MaxFleetPlacements is how many placements FleetDoc lists: the
	// placements not placed (dispatching, unsettled, lost...) first, then
	// the newest.
	MaxFleetPlacements = 200
	// MaxFleetDecisions is how many recent decisions it lists, newest
	// first.
	MaxFleetDecisions = 50
	// MaxFleetNodes is how many nodes it lists, by name.
	MaxFleetNodes = 1000
	// MaxDecisionCandidates is how many candidates DecisionDetail lists
	// (the eligible ones first, as the engine ranks them); Explain has
	// them all.
	MaxDecisionCandidates = 200
)

// FleetDoc is the controller's part of the fleet page.
type FleetDoc struct {
	Nodes      []NodeDoc `json:"nodes"`
	NodesTotal int       `json:"nodes_total"`
	// Placements are slim rows; PlacementsTotal counts them all and
	// PlacementsByLife by lifecycle.
	Placements       []PlacementRow `json:"placements"`
	PlacementsTotal  int            `json:"placements_total"`
	PlacementsByLife map[string]int `json:"placements_by_life"`
	Declarations     []WorkloadDoc  `json:"declarations"`
	// Decisions are the latest decisions this controller made since it
	// started, newest first; DecisionDetail explains each.
	Decisions []DecisionRow `json:"decisions"`
}

// PlacementRow is one placement as the fleet page lists it.
type PlacementRow struct {
	DecisionID string `json:"decision_id"`
	Workload   string `json:"workload"`
	Kind       string `json:"kind"`
	Node       string `json:"node"`
	NodeName   string `json:"node_name,omitempty"`
	Variant    string `json:"variant"`
	InstanceID string `json:"instance_id"`
	Life       string `json:"life"`
	HostState  string `json:"host_state,omitempty"`
	OnDemand   string `json:"on_demand,omitempty"`
	Declared   string `json:"declared,omitempty"`
	// Reason is the last thing that went wrong: the last error, why it
	// was lost or retired; "" when nothing did.
	Reason   string `json:"reason,omitempty"`
	PlacedAt string `json:"placed_at,omitempty"`
}

// DecisionRow is one recent decision in the fleet document.
type DecisionRow struct {
	ID       string `json:"id"`
	Workload string `json:"workload"`
	Kind     string `json:"kind"`
	// Outcome is placed, unplaceable, unsettled, governance or failed;
	// Node (and NodeName) the chosen node.
	Outcome  string `json:"outcome"`
	Node     string `json:"node,omitempty"`
	NodeName string `json:"node_name,omitempty"`
	Eligible int    `json:"eligible"`
	Rejected int    `json:"rejected"`
}

// DecisionDetail is one decision with its explanation: every candidate
// with its score or its rejections (a recent decision), and the text
// nodeld ctl explain prints.
type DecisionDetail struct {
	ExplainResult
	Candidates      []CandidateDoc `json:"candidates,omitempty"`
	CandidatesTotal int            `json:"candidates_total,omitempty"`
}

// CandidateDoc is one node of a decision: eligible with its route and
// score, or rejected with every constraint it fails.
type CandidateDoc struct {
	Node       string         `json:"node"`
	NodeName   string         `json:"node_name,omitempty"`
	Eligible   bool           `json:"eligible"`
	Chosen     bool           `json:"chosen,omitempty"`
	Variant    string         `json:"variant,omitempty"`
	Tier       string         `json:"tier,omitempty"`
	Flags      []string       `json:"flags,omitempty"`
	Score      *ScoreDoc      `json:"score,omitempty"`
	Rejections []RejectionDoc `json:"rejections,omitempty"`
}

// ScoreDoc is an eligible candidate's score and its breakdown.
type ScoreDoc struct {
	Total      float64 `json:"total"`
	Execution  float64 `json:"execution"`
	Locality   float64 `json:"locality"`
	AccelFit   float64 `json:"accel_fit"`
	Perf       float64 `json:"perf"`
	Load       float64 `json:"load"`
	Stickiness float64 `json:"stickiness"`
}

// RejectionDoc is one constraint a candidate fails.
type RejectionDoc struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Fleet returns the controller's part of the fleet page; nil when this
// node runs no controller.
func (b *Router) Fleet() *FleetDoc {
	if b.c == nil {
		return nil
	}
	names := b.nodeNames()
	doc := &FleetDoc{PlacementsByLife: map[string]int{}}
	nodes := b.nodeDocs()
	doc.NodesTotal = len(nodes)
	doc.Nodes = nodes[:min(len(nodes), MaxFleetNodes)]

	ps := b.c.Placements()
	doc.PlacementsTotal = len(ps)
	for _, p := range ps {
		doc.PlacementsByLife[string(p.Life)]++
	}
	// What needs an operator's eye first, then the newest.
	slices.SortStableFunc(ps, func(x, y plane.Placement) int {
		if px, py := x.Life == plane.LifePlaced, y.Life == plane.LifePlaced; px != py {
			if py {
				return -1
			}
			return 1
		}
		if c := y.PlacedAt.Compare(x.PlacedAt); c != 0 {
			return c
		}
		return strings.Compare(x.DecisionID, y.DecisionID)
	})
	ps = ps[:min(len(ps), MaxFleetPlacements)]
	doc.Placements = make([]PlacementRow, len(ps))
	for i, p := range ps {
		doc.Placements[i] = placementRow(p, names)
	}
	doc.Declarations = WorkloadDocs(b.c.Declarations())

	ids := b.c.RecentIDs() // oldest first
	doc.Decisions = make([]DecisionRow, 0, min(len(ids), MaxFleetDecisions))
	for i := len(ids) - 1; i >= 0 && len(doc.Decisions) < MaxFleetDecisions; i-- {
		rep, ok := b.c.Recent(ids[i])
		if !ok {
			continue // dropped since RecentIDs
		}
		doc.Decisions = append(doc.Decisions, decisionRow(rep, names))
	}
	return doc
}

// nodeNames are the configured names by node id, "self" for this node.
func (b *Router) nodeNames() map[string]string {
	names := map[string]string{}
	for id, name := range b.peerNames() {
		if id != "" && name != "" {
			names[id] = name
		}
	}
	names[b.nodeID] = config.SelfRef
	return names
}

func placementRow(p plane.Placement, names map[string]string) PlacementRow {
	r := PlacementRow{
		DecisionID: p.DecisionID, Workload: p.Workload, Kind: p.Kind, Node: p.Node, NodeName: names[p.Node],
		Variant: p.Variant, InstanceID: p.InstanceID, Life: string(p.Life), HostState: p.HostState,
		OnDemand: p.OnDemand, Declared: p.Declared,
	}
	for _, why := range []string{p.LastError, p.LostReason, p.RetireReason} {
		if why != "" {
			r.Reason = why
			break
		}
	}
	if !p.PlacedAt.IsZero() {
		r.PlacedAt = p.PlacedAt.UTC().Format(time.RFC3339)
	}
	return r
}

func decisionRow(rep plane.Report, names map[string]string) DecisionRow {
	d := rep.Decision
	r := DecisionRow{ID: rep.DecisionID, Workload: d.Name, Kind: d.Kind}
	for _, c := range d.Candidates {
		if c.Eligible() {
			r.Eligible++
		} else {
			r.Rejected++
		}
	}
	switch {
	case rep.Placed != nil:
		r.Outcome, r.Node = "placed", rep.Placed.Node
	case rep.Unsettled:
		r.Outcome = "unsettled"
	case rep.Governance != "":
		r.Outcome = string(ctl.CodeGovernance)
	case d.Chosen == nil:
		r.Outcome = CodeUnplaceable
	case len(rep.Attempts) == 0:
		r.Outcome, r.Node = "chosen", d.Chosen.Node // a dry run
	default:
		r.Outcome = "failed"
	}
	r.NodeName = names[r.Node]
	return r
}

// ErrNotExplained wraps the reason a decision could not be explained (an
// unknown or ambiguous id); DecisionDetail's other errors are internal.
var ErrNotExplained = errors.New("decision not explained")

// DecisionDetail explains decision id (or a unique prefix of it) as
// nodeld ctl explain does, with every candidate of a recent decision.
func (b *Router) DecisionDetail(id string) (*DecisionDetail, error) {
	if b.c == nil {
		return nil, fmt.Errorf("%w: this node runs no controller", ErrNotExplained)
	}
	resp := b.explain(id)
	if !resp.OK {
		return nil, fmt.Errorf("%w: %s", ErrNotExplained, resp.Reason)
	}
	var det DecisionDetail
	if err := json.Unmarshal(resp.Result, &det.ExplainResult); err != nil {
		return nil, fmt.Errorf("explain result: %w", err)
	}
	rep, ok := b.c.Recent(det.DecisionID)
	if !ok {
		return &det, nil
	}
	names := b.nodeNames()
	cs := rep.Decision.Candidates
	det.CandidatesTotal = len(cs)
	cs = cs[:min(len(cs), MaxDecisionCandidates)]
	det.Candidates = make([]CandidateDoc, len(cs))
	for i, c := range cs {
		cd := CandidateDoc{Node: c.Node, NodeName: names[c.Node], Eligible: c.Eligible()}
		if cd.Eligible {
			s := c.Score
			cd.Variant, cd.Tier, cd.Flags = c.Variant, c.Tier.String(), c.Flags.Names()
			cd.Score = &ScoreDoc{Total: s.Total, Execution: s.Execution, Locality: s.Locality, AccelFit: s.AccelFit,
				Perf: s.Perf, Load: s.Load, Stickiness: s.Stickiness}
			cd.Chosen = rep.Decision.Chosen != nil && rep.Decision.Chosen.Node == c.Node
		}
		for _, r := range c.Rejections {
			cd.Rejections = append(cd.Rejections, RejectionDoc{Code: string(r.Code), Detail: r.Detail()})
		}
		det.Candidates[i] = cd
	}
	return &det, nil
}

// ErrNoInstance wraps the refusal of logs for an id that names no
// instance of this node's host.
var ErrNoInstance = errors.New("no such instance on this node")

// InstanceLogs returns the last output of one of this node's placed
// instances, through the same verb as nodeld ctl logs (the dispatcher's
// logs, to this node): each stream is bounded by the host
// (host.MaxLogBytes).
func (b *Router) InstanceLogs(ctx context.Context, instanceID string) (*ctl.LogsResult, error) {
	if !grammar.ValidInstanceID(instanceID) {
		return nil, fmt.Errorf("%w: %q is not an instance id", ErrNoInstance, instanceID)
	}
	resp := b.d.Operate(ctx, Request{Verb: VerbLogs, Node: config.SelfRef, Args: Args{Instance: instanceID}})
	if !resp.OK {
		if resp.Class == ClassRefused {
			return nil, fmt.Errorf("%w: %s", ErrNoInstance, resp.Reason)
		}
		return nil, fmt.Errorf("logs of %s: %s %s", instanceID, resp.Class, resp.Reason)
	}
	var res ctl.LogsResult
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		return nil, fmt.Errorf("logs of %s: %w", instanceID, err)
	}
	return &res, nil
}
