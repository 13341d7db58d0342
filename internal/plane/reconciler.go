package plane

// The reconciler: what to do, computed from the state without I/O or
// clock reads (the time is passed in). moves.go, governance.go and
// explainnotes.go hold its rules for move caps, governance and notes.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
)

// evaluate runs governance and the engine for order o on the view at
// now, chaining nothing: the request (shaped by in: the variant, the
// current node, the placement it takes over) and the decision.
func (c *reconciler) evaluate(p Package, o Order, in intent, now time.Time) (engine.Request, engine.Decision, error) {
	v := p.Verified()
	m := v.Manifest
	// A kind the policy does not admit is denied by the gate on every
	// node, with the policy's reason; no trust floor is made up for it.
	minTrust := engine.TrustDiscovered
	if rule, admitted := c.conf().Policy.Kinds[m.Kind]; admitted {
		minTrust = rule.MinTier
	}
	req := request(v, o, minTrust)
	c.shapeRequest(&req, o, in)
	nodes := c.view(now, m.Kind, req.Name)
	c.separateInstances(nodes, m.Kind, req.Name, in)
	dec, err := c.placer.Place(req, nodes, engine.Cluster{}, c.conf().Weights)
	return req, dec, err
}

// view builds the engine's nodes for a workload of kind named name.
func (c *reconciler) view(now time.Time, kind, name string) []engine.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	instances := map[string][]engine.Instance{}
	pending := map[string][]engine.Resources{}
	declared := map[string][]engine.Resources{}
	for _, p := range c.placements {
		switch p.Life {
		case LifePlaced, LifeRetiring, LifeDispatching, LifeUnsettled:
			declared[p.Node] = append(declared[p.Node], p.Reserved.engine())
		}
		switch p.Life {
		case LifePlaced, LifeLost, LifeRescheduled, LifeRetiring:
			instances[p.Node] = append(instances[p.Node], p.engineInstance())
			// Placed after the node's facts were issued: their free
			// memory does not show it yet.
			if n, ok := c.nodes[p.Node]; ok && p.Life == LifePlaced && (n.facts == nil || !p.PlacedAt.Before(n.facts.meta.IssuedAt)) {
				pending[p.Node] = append(pending[p.Node], p.Reserved.engine())
			}
		case LifeDispatching, LifeUnsettled:
			// A decision not yet reflected in the node's facts holds its
			// memory there.
			pending[p.Node] = append(pending[p.Node], p.Reserved.engine())
		}
	}
	ids := make([]string, 0, len(c.nodes))
	for id := range c.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// Each node's capabilities and memory are converted and prepared
	// once per facts, not per decision.
	c.profiles.begin(c.nodes)
	out := make([]engine.Node, 0, len(ids))
	for _, id := range ids {
		n := c.nodes[id]
		// Never more than the node's memory by declared resources.
		if n.facts != nil {
			if sq, ok := declaredSqueeze(n.facts.facts, pending[id], declared[id]); ok {
				pending[id] = append(pending[id], sq)
			}
		}
		verdict, why := gate(c.conf().Policy, kind, n)
		en := engineNode(n, now, c.conf().DeadAfter, c.profiles.of(n), instances[id], pending[id], verdict, why)
		if n.facts != nil {
			// Place reads the profile; the swap's choice reads Memory.
			en.Memory = memory(n.facts.facts)
		}
		out = append(out, en)
	}
	c.profiles.compact(ids, out)
	return out
}

// shapeRequest applies what the order and intent add to the engine
// request: the one variant allowed, and the node the workload runs on now
// (CurrentNode, for the engine's stickiness): for an upgrade, the node of
// the version it replaces; for a reschedule of a sticky package, the node
// it was lost on (its node if that answers; a dead node is rejected
// anyway).
func (c *reconciler) shapeRequest(req *engine.Request, o Order, in intent) {
	if o.Variant != "" {
		req.Variants = slices.DeleteFunc(req.Variants, func(v engine.Variant) bool { return v.Name != o.Variant })
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case in.supersedes != nil:
		req.CurrentNode = in.supersedes.Node
	case in.replaces != nil && req.Sticky:
		req.CurrentNode = in.replaces.Node
	}
}

// separateInstances denies, by gate verdict, every node that holds (or is
// being given) another instance of the workload kind/name: replicas of one
// workload go on distinct nodes, and an instance is never placed where an
// instance of the same workload (which the node would name the same, or
// which is being unloaded there) is. The placement the new one takes over
// from does not count.
func (c *reconciler) separateInstances(nodes []engine.Node, kind, name string, in intent) {
	var over string
	if o := in.over(); o != nil {
		over = o.DecisionID
	}
	c.mu.Lock()
	held := map[string]*Placement{}
	for _, p := range c.placements {
		if p.Kind == kind && p.Workload == name && p.DecisionID != over {
			held[p.Node] = p
		}
	}
	c.mu.Unlock()
	for i := range nodes {
		n := &nodes[i]
		p, ok := held[n.ID]
		if !ok || n.Gate != engine.VerdictAllow {
			continue
		}
		n.Gate = engine.VerdictDeny
		n.GateReason = fmt.Sprintf("holds another instance of %s/%s (%s, decision %.12s)", kind, name, p.Life, p.DecisionID)
	}
}

// takenLocked says why pl may not go to node now: another placement of
// the same workload is there (being placed, placed, lost, or being
// unloaded), other than the one pl takes over from; "" when it may. The
// caller holds mu.
func (c *reconciler) takenLocked(pl *Placement, node string) string {
	for _, p := range c.placements {
		if p == pl || p.Node != node || p.Kind != pl.Kind || p.Workload != pl.Workload ||
			p.DecisionID == pl.Replaces || p.DecisionID == pl.Supersedes {
			continue
		}
		return fmt.Sprintf("holds another instance of %s/%s (%s, decision %.12s)", p.Kind, p.Workload, p.Life, p.DecisionID)
	}
	return ""
}

// sortedLocked is sortedPlacements for a caller holding mu.
func (c *reconciler) sortedLocked() []*Placement {
	ps := make([]*Placement, 0, len(c.placements))
	for _, p := range c.placements {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *Placement) int { return strings.Compare(a.DecisionID, b.DecisionID) })
	return ps
}

// replacementPendingLocked is replacementPending for a caller holding mu.
func (c *reconciler) replacementPendingLocked(pl *Placement) bool {
	if pl.ReplacedBy == "" {
		return false
	}
	r, ok := c.placements[pl.ReplacedBy]
	return ok && (r.Life == LifeDispatching || r.Life == LifeUnsettled)
}

// outdated returns the placed instance of workload name, lowest replica
// first, that runs another package than manifestHash and was not stopped
// by the operator; nil when none.
func (c *reconciler) outdated(name, manifestHash string) *Placement {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *Placement
	for _, p := range c.placements {
		if p.Declared != name || p.Life != LifePlaced || p.Stopped || p.ManifestHash == manifestHash || c.busy[p.DecisionID] {
			continue
		}
		if best == nil || p.Replica < best.Replica || (p.Replica == best.Replica && p.DecisionID < best.DecisionID) {
			best = p
		}
	}
	return best
}

// declared returns the declared workload name.
func (c *reconciler) declared(name string) (Workload, bool) {
	for _, w := range c.conf().Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}

func (c *reconciler) nodeOf(id string, now time.Time) nodeView {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[id]
	if !ok {
		since, seen := c.gone[id]
		if !seen {
			since = now
			c.gone[id] = since
		}
		return nodeView{dead: now.Sub(since) >= c.conf().DeadAfter}
	}
	return nodeView{known: true, alive: n.alive, dead: n.dead(now, c.conf().DeadAfter), status: n.status}
}
