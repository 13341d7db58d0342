package plane

import (
	"maps"
	"slices"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
)

// profiles keeps each node's engine.Profile (its capability records and
// free memory, converted and prepared for the engine) while the node's
// facts do not change: a decision converts and prepares only the nodes
// whose facts changed since the last one. A node's cachedFacts is
// replaced whole when ingestFacts takes newer facts (a higher seq), so
// the same pointer means the same facts. A node signs every describe
// with a new seq but probes again only now and then, so newer facts
// whose records and memory are those the Profile was prepared from keep
// it too. The zero value is ready; guarded by Controller.mu.
//
// The Profiles are given to the engine compacted (engine.Compact: laid
// out one after the other in the order of the view, which the engine
// reads faster), for views of compactMin nodes or more: compacted again
// when an eighth of the nodes have a
// Profile prepared since the last compaction, so that a compaction,
// which a kept Decision keeps alive whole, is made once per many
// changes, not per change.
type profiles struct {
	syms   *engine.Symbols
	byNode map[string]profileEntry
	empty  *engine.Profile // for a node without facts
	loose  int             // nodes of the current view whose Profile is not compacted
}

type profileEntry struct {
	facts     *cachedFacts // what it was prepared from
	profile   *engine.Profile
	compacted *engine.Profile // profile, compacted; nil until it is
}

// maxSymbols bounds the vocabulary kept for nodes: facts that keep
// bringing new strings (attribute values that change with every update)
// grow it, so past this it is started anew and every node prepared again.
func maxSymbols(nodes int) int { return 1<<14 + 1<<10*nodes }

// begin starts a view of nodes: it drops what belongs to nodes no longer
// known, and starts anew when the vocabulary has grown past maxSymbols.
func (ps *profiles) begin(nodes map[string]*nodeState) {
	if ps.syms == nil || ps.syms.Len() > maxSymbols(len(nodes)) {
		ps.syms = engine.NewSymbols()
		ps.byNode = make(map[string]profileEntry, len(nodes))
		ps.empty = nil
		ps.loose = 0
		return
	}
	ps.loose = 0
	for id := range ps.byNode {
		if _, ok := nodes[id]; !ok {
			delete(ps.byNode, id)
		}
	}
}

// of returns n's Profile: the one kept for its current facts, or one
// prepared now.
func (ps *profiles) of(n *nodeState) *engine.Profile {
	if n.facts == nil {
		if ps.empty == nil {
			ps.empty = ps.syms.Prepare(nil, engine.Memory{})
		}
		return ps.empty
	}
	id := n.target.ID
	if e, ok := ps.byNode[id]; ok && (e.facts == n.facts || sameProfileInput(e.facts.facts, n.facts.facts)) {
		if e.facts != n.facts {
			e.facts = n.facts
			ps.byNode[id] = e
		}
		if e.compacted != nil {
			return e.compacted
		}
		ps.loose++
		return e.profile
	}
	p := ps.syms.Prepare(capabilities(n.facts.facts), memory(n.facts.facts))
	ps.byNode[id] = profileEntry{facts: n.facts, profile: p}
	ps.loose++
	return p
}

// compactMin is the fewest nodes whose Profiles are compacted: the
// Profiles of fewer nodes stay in the processor's caches from one
// decision to the next wherever they lie.
const compactMin = 128

// compact ends a view (nodes, in the order of ids): when an eighth of
// its nodes or more have a Profile not compacted, the Profiles of every
// node with facts are compacted in this order and given to the nodes,
// and kept for the next views.
func (ps *profiles) compact(ids []string, nodes []engine.Node) {
	if len(nodes) < compactMin || ps.loose == 0 || ps.loose < len(nodes)/8 {
		return
	}
	prs := make([]*engine.Profile, len(nodes))
	for i := range nodes {
		if e, ok := ps.byNode[ids[i]]; ok && (nodes[i].Profile == e.profile || nodes[i].Profile == e.compacted) {
			prs[i] = e.profile
		}
	}
	compacted := engine.Compact(prs)
	for i := range nodes {
		if prs[i] != nil {
			e := ps.byNode[ids[i]]
			e.compacted = compacted[i]
			ps.byNode[ids[i]] = e
			nodes[i].Profile = compacted[i]
		}
	}
	ps.loose = 0
}

// sameProfileInput reports whether a and b give the same capabilities and
// memory: the same capability records, or, for facts without records,
// the same fields they are derived from.
func sameProfileInput(a, b facts.Facts) bool {
	if !slices.EqualFunc(a.Capabilities, b.Capabilities, sameCapability) {
		return false
	}
	if len(a.Capabilities) > 0 {
		return true
	}
	return a.Arch == b.Arch && a.OS == b.OS && a.MemFreeBytes == b.MemFreeBytes &&
		slices.Equal(a.Runtimes, b.Runtimes) && slices.Equal(a.GPUs, b.GPUs) && maps.Equal(a.Labels, b.Labels)
}

func sameCapability(a, b facts.Capability) bool {
	return a.ID == b.ID && a.Provenance == b.Provenance && a.State == b.State && a.Exclusive == b.Exclusive &&
		maps.EqualFunc(a.Attrs, b.Attrs, grammar.Value.Equal)
}
