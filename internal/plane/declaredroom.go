package plane

import (
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
)

// The node's memory by declared resources. The engine fits a workload in
// a node's free memory (its facts) less the pending reservations, and a
// placed instance's reservation stops counting once facts issued after
// its placement arrive: they are assumed to show its memory in use. A
// model server that does not (yet) use what it declares (one still
// loading, or the echo-llm example standing in for a model) would then
// let the controller give a node more than its memory by declared
// resources. declaredSqueeze is the reservation that keeps the room the
// engine sees within the node's memory less what its instances declare.

// declaredSqueeze is the extra reservation on a node whose facts are f,
// with pending the reservations the engine already counts and declared
// those of every instance the controller holds on the node: what the
// engine's room (free less pending) exceeds the declared room (total
// less declared) by. ok is false when there is none (or no total known).
// Only host memory (the one pool of a unified node) is squeezed.
func declaredSqueeze(f facts.Facts, pending, declared []engine.Resources) (engine.Resources, bool) {
	mem := memory(f)
	total := memTotal(f)
	if total == 0 {
		return engine.Resources{}, false
	}
	var pend, used uint64
	for _, r := range pending {
		pend += r.HostBytes
		if mem.Unified {
			pend += r.AccelBytes
		}
	}
	for _, r := range declared {
		used += r.HostBytes
		if mem.Unified {
			used += r.AccelBytes
		}
	}
	room := satSub(mem.HostFree, pend)
	declRoom := satSub(total, used)
	if room <= declRoom {
		return engine.Resources{}, false
	}
	return engine.Resources{HostBytes: room - declRoom}, true
}

// memTotal is a node's memory: the total of its mem.unified or
// mem.system record, else the facts' MemTotalBytes (0: unknown).
func memTotal(f facts.Facts) uint64 {
	var sys uint64
	for _, c := range f.Capabilities {
		switch c.ID {
		case grammar.CapMemUnified:
			return bytesAttr(c, grammar.AttrTotal)
		case grammar.CapMemSystem:
			sys = bytesAttr(c, grammar.AttrTotal)
		}
	}
	if sys != 0 {
		return sys
	}
	return f.MemTotalBytes
}

// satSub is a-b, or 0 when b is larger.
func satSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
