package operator

import (
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/plane"
)

// ControllerDoc is the controller's part of the status: its targets and
// what it placed.
type ControllerDoc struct {
	// TargetsByLiveness counts the targets: alive, suspect, dead.
	TargetsByLiveness map[string]int `json:"targets_by_liveness"`
	// PlacementsByLife counts the placements: dispatching, unsettled,
	// placed, lost, rescheduled.
	PlacementsByLife map[string]int `json:"placements_by_life"`
	// Unsettled is the number of decisions whose place went without an
	// answer and that are not reconciled yet.
	Unsettled int         `json:"unsettled"`
	Targets   []TargetDoc `json:"targets"`
	// DeclarationsByState counts the declared workloads: placed, pending,
	// unplaceable; Unplaceable names the unplaceable ones (nodeld ctl
	// workloads says why).
	DeclarationsByState map[string]int `json:"declarations_by_state"`
	Unplaceable         []string       `json:"unplaceable"`
	// Capped lists the lost placements not placed again: they moved
	// max_reschedules times within reschedule_window (ctl start places
	// one again).
	Capped []CappedDoc `json:"capped,omitempty"`
	// OnDemand is each on-demand workload's state (cold, starting, ready,
	// idle), by workload name; absent when there is none.
	OnDemand map[string]string `json:"on_demand,omitempty"`
	// Raft is the controller's place among controller.voters; absent for
	// a single controller (a one-voter raft cluster that always leads).
	Raft *RaftDoc `json:"raft,omitempty"`
}

// RaftDoc is a replicated controller's role in the status.
type RaftDoc struct {
	// Role is leader, follower, candidate or shutdown.
	Role string `json:"role"`
	// Term is the raft term this controller knows.
	Term uint64 `json:"term"`
	// Leader is the leader's node id and LeaderName its peer name (or
	// this node's config.SelfRef); both empty while no leader is known.
	Leader     string `json:"leader,omitempty"`
	LeaderName string `json:"leader_name,omitempty"`
}

// CappedDoc is one capped placement in the status.
type CappedDoc struct {
	DecisionID string `json:"decision_id"`
	Workload   string `json:"workload"`
	Node       string `json:"node"`
	Moves      int    `json:"moves"`
}

// TargetDoc is one controller target in the status.
type TargetDoc struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Tier     string `json:"tier"`
	Liveness string `json:"liveness"`
}

// ControllerStatus is the controller's part of /v1/status; nil when this
// node runs no controller.
func (b *Router) ControllerStatus() *ControllerDoc {
	if b.c == nil {
		return nil
	}
	doc := &ControllerDoc{
		TargetsByLiveness: map[string]int{},
		PlacementsByLife:  map[string]int{},
		Targets:           []TargetDoc{},
	}
	for _, nd := range b.nodeDocs() {
		doc.TargetsByLiveness[nd.Liveness]++
		doc.Targets = append(doc.Targets, TargetDoc{ID: nd.ID, Name: nd.Name, Tier: nd.Tier, Liveness: nd.Liveness})
	}
	for _, p := range b.c.Placements() {
		doc.PlacementsByLife[string(p.Life)]++
		if p.Life == plane.LifeUnsettled {
			doc.Unsettled++
		}
		if p.Capped && p.Life == plane.LifeLost {
			doc.Capped = append(doc.Capped, CappedDoc{DecisionID: p.DecisionID, Workload: p.Workload, Node: p.Node, Moves: len(p.Moves)})
		}
	}
	ds := b.c.Declarations()
	doc.DeclarationsByState, doc.Unplaceable = declarationCounts(ds)
	doc.OnDemand = onDemandStates(ds)
	if info := b.c.Leadership(); info.Term > 0 || info.Role != plane.RoleLeader {
		doc.Raft = &RaftDoc{Role: info.Role, Term: info.Term, Leader: info.Leader, LeaderName: b.nodeName(info.Leader)}
	}
	return doc
}

// nodeName is the name of node id: config.SelfRef, a peer's configured name, or
// "" when it has none.
func (b *Router) nodeName(id string) string {
	switch {
	case id == "":
		return ""
	case id == b.nodeID:
		return config.SelfRef
	case b.peerNames != nil:
		return b.peerNames()[id]
	}
	return ""
}

// onDemandStates are the on-demand workloads' states by name; nil when
// none is on demand.
func onDemandStates(ds []plane.DeclarationView) map[string]string {
	var out map[string]string
	for _, d := range ds {
		if d.OnDemand == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[d.Name] = d.OnDemand
	}
	return out
}
