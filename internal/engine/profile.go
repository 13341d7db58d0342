package engine

import (
	"math"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Profile is a node's capability records and free memory prepared for
// Place: ids, attribute names and string values interned in a Symbols,
// provenance, state and attribute values reduced to small integers, and
// what scoring reads of the node (load, whether it has an accelerator,
// its memory pools) worked out once. It is what changes only when the
// node's facts change: the caller prepares it when it gets new facts and
// gives it to every decision until the next (Node.Profile).
//
// A Profile is immutable and safe for concurrent use. It keeps a copy of
// the capability ids of the records it was prepared from (one string,
// for Candidate.Assigned), nothing else of them.
//
// What a decision reads of every node comes first, in the first two
// cache lines; what explanations and rare cases read comes last.
type Profile struct {
	vocab *Symbols
	idSym []int32 // per capability, the symbol of its id (what a scan reads)
	caps  []pcap
	busy  int32 // capabilities busy or reserved
	accel bool  // a capability of the accelerator family
	attrs []pattr
	mem   memory // the pools; no pending

	elems []pval   // the elements of list attributes
	odd   []string // per capability, its state when not a grammar state; nil when none is
	ids   string   // the capability ids, one after the other (one pointer for the collector to trace)
	idAt  []int32  // capability i's id is ids[idAt[i]:idAt[i+1]]
}

// pcap is one prepared capability record.
type pcap struct {
	sym             int32 // the id
	attrAt, attrEnd int32 // its attributes in Profile.attrs
	prov            int8  // grammar.ProvenanceRank; 0 for none
	state           uint8 // state*
	flags           uint8 // cap*
}

// States of a prepared capability.
const (
	stateAvailable uint8 = iota // available, or no state
	stateBusy
	stateReserved
	stateDegraded
	stateOther // not a grammar state: never usable; Profile.odd has its text
)

// Bits of pcap.flags.
const (
	capExclusive uint8 = 1 << iota
	capAccel           // in the accelerator family
)

// pattr is one prepared attribute: its name's symbol and its value (pval
// encoding).
type pattr struct {
	bits uint64
	name int32
	kind grammar.ValueKind
}

// pval is a prepared scalar value: a bool as 0 or 1, an integer as its
// two's complement, a float as its IEEE bits, a string as its symbol (or
// ^0 for a string not interned, which equals nothing interned). A list
// attribute keeps its elements' start in Profile.elems in the high 32
// bits and their number in the low 32.
type pval struct {
	bits uint64
	kind grammar.ValueKind
}

// Prepare prepares a node's capability records and free memory, interning
// their strings in s. It reads caps and mem only while it runs.
func (s *Symbols) Prepare(caps []Capability, mem Memory) *Profile {
	nattrs, nelems, nid := 0, 0, 0
	for i := range caps {
		nid += len(caps[i].ID)
		nattrs += len(caps[i].Attrs)
		for k := range caps[i].Attrs {
			nelems += caps[i].Attrs[k].Value.Len()
		}
	}
	ints := make([]int32, 2*len(caps)+1) // idSym, then idAt
	p := &Profile{vocab: s, idSym: ints[:len(caps):len(caps)], idAt: ints[len(caps):],
		caps: make([]pcap, len(caps)), attrs: make([]pattr, 0, nattrs)}
	if nelems > 0 {
		p.elems = make([]pval, 0, nelems)
	}
	var ids strings.Builder
	ids.Grow(nid)
	for i := range caps {
		ids.WriteString(caps[i].ID)
		p.idAt[i+1] = int32(ids.Len())
	}
	p.ids = ids.String()
	s.mu.Lock()
	for i := range caps {
		c := &caps[i]
		pc := pcap{sym: s.intern(c.ID), attrAt: int32(len(p.attrs))}
		rank, _ := grammar.ProvenanceRank(c.Provenance)
		pc.prov = int8(rank)
		switch c.State {
		case "", grammar.StateAvailable:
			pc.state = stateAvailable
		case grammar.StateBusy:
			pc.state = stateBusy
			p.busy++
		case grammar.StateReserved:
			pc.state = stateReserved
			p.busy++
		case grammar.StateDegraded:
			pc.state = stateDegraded
		default:
			pc.state = stateOther
			if p.odd == nil {
				p.odd = make([]string, len(caps))
			}
			p.odd[i] = c.State
		}
		if c.Exclusive {
			pc.flags |= capExclusive
		}
		if grammar.SelectorMatches(accelFamily, c.ID) {
			pc.flags |= capAccel
			p.accel = true
		}
		for k := range c.Attrs {
			a := &c.Attrs[k]
			pa := pattr{name: s.intern(a.Name), kind: a.Value.Kind()}
			if pa.kind == grammar.KindList {
				at := len(p.elems)
				for k := range a.Value.Len() {
					p.elems = append(p.elems, s.encode(a.Value.Elem(k)))
				}
				pa.bits = uint64(at)<<32 | uint64(len(p.elems)-at)
			} else {
				pa.bits = s.encode(a.Value).bits
			}
			p.attrs = append(p.attrs, pa)
		}
		pc.attrEnd = int32(len(p.attrs))
		p.caps[i] = pc
		p.idSym[i] = pc.sym
	}
	s.mu.Unlock()
	p.mem = memory{unified: mem.Unified, host: mem.HostFree}
	if !mem.Unified {
		for _, f := range mem.VRAMFree {
			p.mem.vram = satAdd(p.mem.vram, f)
		}
	}
	return p
}

// id returns capability i's id.
func (p *Profile) id(i int32) string { return p.ids[p.idAt[i]:p.idAt[i+1]] }

// encode prepares a scalar, interning a string; the caller holds mu for
// writing.
func (s *Symbols) encode(v grammar.Value) pval {
	e := scalar(v)
	if e.kind == grammar.KindString {
		str, _ := v.Str()
		e.bits = uint64(s.intern(str))
	}
	return e
}

// scalar is the pval of a scalar but for a string's symbol, which the
// caller fills in. A list (in a list) or an invalid Value keeps its
// kind, which nothing equals.
func scalar(v grammar.Value) pval {
	e := pval{kind: v.Kind()}
	switch e.kind {
	case grammar.KindBool:
		if b, _ := v.Bool(); b {
			e.bits = 1
		}
	case grammar.KindInt:
		i, _ := v.Int()
		e.bits = uint64(i)
	case grammar.KindFloat:
		f, _ := v.Number()
		e.bits = math.Float64bits(f)
	}
	return e
}

// number reads a prepared integer or float as a float64.
func number(kind grammar.ValueKind, bits uint64) (float64, bool) {
	switch kind {
	case grammar.KindInt:
		return float64(int64(bits)), true
	case grammar.KindFloat:
		return math.Float64frombits(bits), true
	default:
		return 0, false
	}
}

// equal is looseEqual on prepared scalars: integers and floats compare
// numerically (integers exactly with each other), bools and strings
// (symbols) by value; lists and invalid values equal nothing.
func equal(ak grammar.ValueKind, ab uint64, bk grammar.ValueKind, bb uint64) bool {
	if ak == bk {
		switch ak {
		case grammar.KindBool, grammar.KindInt, grammar.KindString:
			return ab == bb
		case grammar.KindFloat:
			return math.Float64frombits(ab) == math.Float64frombits(bb)
		}
		return false
	}
	a, ok := number(ak, ab)
	b, ok2 := number(bk, bb)
	return ok && ok2 && a == b
}

// attr returns the first attribute of capability c named name, or nil.
func (p *Profile) attr(c *pcap, name int32) *pattr {
	for i := c.attrAt; i < c.attrEnd; i++ {
		if p.attrs[i].name == name {
			return &p.attrs[i]
		}
	}
	return nil
}
