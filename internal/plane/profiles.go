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
type profiles struct {
	syms   *engine.Symbols
	byNode map[string]profileEntry
	empty  *engine.Profile // for a node without facts
}

type profileEntry struct {
	facts   *cachedFacts // what it was prepared from
	profile *engine.Profile
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
		return
	}
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
		e.facts = n.facts
		ps.byNode[id] = e
		return e.profile
	}
	p := ps.syms.Prepare(capabilities(n.facts.facts), memory(n.facts.facts))
	ps.byNode[id] = profileEntry{facts: n.facts, profile: p}
	return p
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
