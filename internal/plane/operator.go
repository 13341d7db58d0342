package plane

// This file is what the operator surface reads of a running controller:
// the explanations of recent decisions, each target's view, and the
// check a config reload runs on new targets before it commits them.

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
)

// MaxRecentReports bounds the reports Recent keeps: the explanations of
// the latest decisions of this run (operator places, dry runs and
// reschedules alike). Older decisions, and those of an earlier run, are
// known by their chain records and placements only.
const MaxRecentReports = 256

// recentReports is a bounded ring of the latest reports by decision id.
// The zero value is ready to use.
type recentReports struct {
	mu sync.Mutex // guards ids, next and byID
	// ids holds the decision ids in the order they were added, as a ring
	// of at most MaxRecentReports; next is where the next one goes once
	// it is full.
	ids  []string
	next int
	byID map[string]Report
}

// add keeps rep, dropping the oldest report when the ring is full. A
// report without a decision id (no decision was made) is not kept.
func (r *recentReports) add(rep Report) {
	if rep.DecisionID == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = make(map[string]Report, MaxRecentReports)
	}
	if _, ok := r.byID[rep.DecisionID]; ok {
		// A decision settled again (an unsettled one dispatched on a
		// later tick) keeps its place in the ring.
		r.byID[rep.DecisionID] = rep
		return
	}
	if len(r.ids) < MaxRecentReports {
		r.ids = append(r.ids, rep.DecisionID)
	} else {
		delete(r.byID, r.ids[r.next])
		r.ids[r.next] = rep.DecisionID
		r.next = (r.next + 1) % MaxRecentReports
	}
	r.byID[rep.DecisionID] = rep
}

func (r *recentReports) get(id string) (Report, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.byID[id]
	return rep, ok
}

// idList returns the decision ids kept, oldest first.
func (r *recentReports) idList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Once full, the ring's oldest is at next.
	return slices.Concat(r.ids[r.next:], r.ids[:r.next])
}

// Recent returns the report of decision id when it is one of the last
// MaxRecentReports decisions this controller made since it started.
func (c *readModel) Recent(id string) (Report, bool) { return c.recent.get(id) }

// RecentIDs returns the decision ids Recent knows, oldest first.
func (c *readModel) RecentIDs() []string { return c.recent.idList() }

// CheckTargets reports every problem of a target list, as SetTargets and
// New would: a config reload checks its new targets with it before it
// commits them, so that the commit cannot fail.
func CheckTargets(ts []Target) error { return checkTargets(ts) }

// NodeView is one target as an operator reads it (nodeld ctl nodes).
type NodeView struct {
	ID   string
	Tier engine.Trust
	// Self is this node's own host.
	Self     bool
	Liveness engine.Liveness
	// LastContact is the last verified describe (the controller's start
	// for a node not heard from since).
	LastContact time.Time
	// HasFacts is true while verified, unexpired facts are cached; the
	// fields below describe them.
	HasFacts    bool
	FactsSeq    uint64
	FactsIssued time.Time
	FactsExpire time.Time
	// FactsAge is how old the cached facts were at the time of the view.
	FactsAge time.Duration
	// MemFreeBytes and MemTotalBytes are the node's memory (the one pool
	// of a unified-memory node); VRAMFreeBytes and VRAMTotalBytes sum its
	// GPUs.
	MemFreeBytes   uint64
	MemTotalBytes  uint64
	GPUs           int
	VRAMFreeBytes  uint64
	VRAMTotalBytes uint64
	// Class is the node class its facts claim (node.class.<class>, the
	// operator's node.class), "" when none.
	Class string
	// Instances is the number of instances the node listed in the latest
	// tick; -1 when it gave no listing (not readable, or not answering).
	Instances int
	// Placements is the number of this controller's placements on the
	// node, whatever their life.
	Placements int
}

// NodeViews returns every target's view, by node id.
func (c *readModel) NodeViews() []NodeView {
	now := c.now()
	dead := c.conf().DeadAfter
	c.mu.Lock()
	defer c.mu.Unlock()
	placed := map[string]int{}
	for _, p := range c.placements {
		placed[p.Node]++
	}
	out := make([]NodeView, 0, len(c.nodes))
	for _, n := range c.nodes {
		v := NodeView{
			ID: n.target.ID, Tier: n.target.Tier, Self: n.target.Self, Liveness: n.liveness(now, dead),
			LastContact: n.lastContact, Instances: -1, Placements: placed[n.target.ID],
		}
		if f := n.facts; f != nil && now.Before(f.meta.ExpiresAt) {
			v.HasFacts = true
			v.FactsSeq, v.FactsIssued, v.FactsExpire = f.meta.Seq, f.meta.IssuedAt, f.meta.ExpiresAt
			v.FactsAge = max(now.Sub(f.meta.IssuedAt), 0)
			v.MemFreeBytes, v.MemTotalBytes = f.facts.MemFreeBytes, f.facts.MemTotalBytes
			v.GPUs = len(f.facts.GPUs)
			v.Class = nodeClass(f.facts.Capabilities)
			for _, g := range f.facts.GPUs {
				v.VRAMFreeBytes += g.VRAMFreeBytes
				v.VRAMTotalBytes += g.VRAMTotalBytes
			}
		}
		if n.status != nil {
			v.Instances = len(n.status.Instances)
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b NodeView) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// nodeClass is the class of the first node.class.<class> record in caps,
// "" when there is none.
func nodeClass(caps []facts.Capability) string {
	for _, c := range caps {
		if class, ok := strings.CutPrefix(c.ID, grammar.CapNodeClass+"."); ok {
			return class
		}
	}
	return ""
}

// Placements returns a copy of every placement, by decision id.
func (c *readModel) Placements() []Placement {
	od := map[string]bool{}
	for _, w := range c.conf().Workloads {
		od[w.Name] = w.OnDemand != nil
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Placement, 0, len(c.placements))
	for _, p := range c.placements {
		cp := p.clone()
		if od[p.Declared] && p.Life == LifePlaced {
			cp.OnDemand = c.instanceStateLocked(p, now)
		}
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b Placement) int { return strings.Compare(a.DecisionID, b.DecisionID) })
	return out
}
