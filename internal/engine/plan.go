package engine

import (
	"slices"

	"github.com/nodeld/nodeld/internal/grammar"
)

// plan is a Request compiled once per Place call against the symbols of
// the nodes' Profiles, so that the per-node work compares integers, does
// no lookups by name and allocates nothing but the Decision.
type plan struct {
	req *Request
	w   *Weights
	t   *texts

	// reqs are every requirement the engine matches: the common ones
	// [0, nCommon), then each variant's (variants[v].start..end), then the
	// preferences' [prefStart, len).
	reqs      []reqPlan
	counts    []int32 // each requirement's count, as in reqs
	nCommon   int
	variants  []variantPlan
	prefStart int

	// chain gives, per symbol, the first link of the selectors that
	// select a capability with that id: its own, then its dot-prefix's,
	// and so on (-1: none). A node's capabilities are scanned once; the
	// selections of the variants after the first are only noted, and
	// matched if route selection gets past the first variant: a node that
	// fits it never needs the others.
	chain    []int32
	links    []link
	hasLater bool // a later variant has a requirement

	// routes lists, per variant, its route's requirements: the common
	// ones, then the variant's.
	routes [][]int32
	// disjoint is, per variant, whether no two requirements of its route
	// select a common capability id (neither selector is the other's or
	// one of its dot-prefixes): joint matching then cannot fail where
	// each requirement passes alone, and each gets what it would alone.
	disjoint []bool
	// routeCaps is, per variant, the capabilities its route is given: the
	// sum of its requirements' counts.
	routeCaps []int

	revokedRef  int32  // the revoked ref, when one of the request's is, in t.strs; else -1
	coResidency bool   // the request has labels or excludes
	labelMask   uint64 // textBit of each label
	excludeMask uint64 // textBit of each exclude

	perf       *PerfTarget
	perfParam  int32 // symbol of the perf target's parameter
	perfValue  pval  // its value
	perfMul    float64
	symValue   int32   // symbol of the attribute "value"
	symMemSize int32   // symbol of the attribute "mem_bytes"
	operands   []pval  // the elements of "in" operands
	allSyms    []int32 // scratch of compile
}

type reqPlan struct {
	cpreds    []cpred
	count     int
	exclusive bool
	minRank   int
}

// cpred is a compiled predicate.
type cpred struct {
	attr int32 // symbol of the attribute name
	op   uint8
	kind grammar.ValueKind
	bits uint64  // the operand (pval), or the position of an "in" list in plan.operands
	num  float64 // the operand as a number, for gte and lte
}

type variantPlan struct {
	start, end int // its requirements in plan.reqs
	emulated   bool
	res        Resources
}

// link is one selector in a chain: a requirement's, or a pseudo-selector.
type link struct {
	req   int32 // index in plan.reqs, or one of the sel* kinds below
	next  int32 // the next link of the chain, or -1
	sym   int32 // the selector's symbol
	exact bool  // selects the id sym only (dev class, perf target): not inherited
	later bool  // a requirement of a variant after the first: matched on demand
}

// Pseudo-selectors.
const (
	selDev  int32 = -1 - iota // Weights.DevFallbackClass, exactly
	selPerf                   // the perf target's id, exactly
)

// texts is what rejection details are made of (why.Detail): the
// request's names, copied, so that a Decision shares no memory with the
// request but strings and Values; and what the decision's rejections
// name of the nodes (strs, figs, conflicts), appended to while Place
// runs, never after.
type texts struct {
	strs      []string   // gate reasons, unknown states, the revoked ref
	figs      figStore   // nodes' memory figures; perf figures' bits
	conflicts []conflict // co-residency

	reqs     []reqText
	variants []string
	minTrust Trust
	perfID   string
	budget   float64
	res      []Resources // per variant
}

type reqText struct {
	sel       string
	variant   int32 // -1 for a common requirement
	preds     []Predicate
	count     int
	exclusive bool
	minRank   int
}

func compile(req *Request, w *Weights, cl *Cluster, syms *Symbols) *plan {
	p := &plan{req: req, w: w, perf: req.Perf, revokedRef: -1}
	n := len(req.Requirements) + len(req.Preferences)
	for _, v := range req.Variants {
		n += len(v.Requirements)
	}
	p.reqs = make([]reqPlan, 0, n)
	t := &texts{reqs: make([]reqText, 0, n), variants: make([]string, len(req.Variants)),
		res: make([]Resources, len(req.Variants)), minTrust: req.MinTrust}
	p.t = t

	// Every string to look up, in one pass under the symbols' lock:
	// selectors, attribute names, string operands.
	var strs []string
	want := func(s string) int32 {
		strs = append(strs, s)
		return int32(len(strs) - 1)
	}
	type pending struct {
		bits    *uint64 // where a string operand's symbol goes, or nil
		operand int     // else the index in p.operands where it goes
		at      int32
	}
	var fix []pending
	var selAt []int32 // per requirement: its selector in strs
	var predAttr []*int32
	var predAttrAt []int32

	floor, _ := grammar.ProvenanceRank(req.MinProvenance)
	add := func(q *Requirement, variant int32) {
		rank, _ := grammar.ProvenanceRank(q.MinProvenance)
		count := max(q.Count, 1)
		cp := make([]cpred, len(q.Predicates))
		for i := range q.Predicates {
			pr := &q.Predicates[i]
			c := &cp[i]
			c.op = opCode(pr.Op)
			c.kind = pr.Value.Kind()
			c.num, _ = pr.Value.Number()
			predAttr = append(predAttr, &c.attr)
			predAttrAt = append(predAttrAt, want(pr.Attr))
			switch c.kind {
			case grammar.KindList:
				at := len(p.operands)
				for k := range pr.Value.Len() {
					e := pr.Value.Elem(k)
					p.operands = append(p.operands, scalarOperand(e))
					if e.Kind() == grammar.KindString {
						s, _ := e.Str()
						fix = append(fix, pending{at: want(s), operand: len(p.operands) - 1})
					}
				}
				c.bits = uint64(at)<<32 | uint64(len(p.operands)-at)
			case grammar.KindString:
				s, _ := pr.Value.Str()
				fix = append(fix, pending{at: want(s), bits: &c.bits})
			default:
				c.bits = scalarOperand(pr.Value).bits
			}
		}
		selAt = append(selAt, want(q.Selector))
		p.reqs = append(p.reqs, reqPlan{cpreds: cp, count: count, exclusive: q.Exclusive, minRank: max(rank, floor)})
		t.reqs = append(t.reqs, reqText{sel: q.Selector, variant: variant, preds: slices.Clone(q.Predicates),
			count: count, exclusive: q.Exclusive, minRank: max(rank, floor)})
	}
	for i := range req.Requirements {
		add(&req.Requirements[i], -1)
	}
	p.nCommon = len(p.reqs)
	p.variants = make([]variantPlan, len(req.Variants))
	for vi := range req.Variants {
		v := &req.Variants[vi]
		start := len(p.reqs)
		for i := range v.Requirements {
			add(&v.Requirements[i], int32(vi))
		}
		p.variants[vi] = variantPlan{start: start, end: len(p.reqs), emulated: v.Execution == Emulated, res: v.Resources}
		t.variants[vi], t.res[vi] = v.Name, v.Resources
	}
	p.prefStart = len(p.reqs)
	for i := range req.Preferences {
		add(&req.Preferences[i].Requirement, -1)
	}
	p.counts = make([]int32, len(p.reqs))
	for ri := range p.reqs {
		p.counts[ri] = int32(p.reqs[ri].count)
	}
	devAt, perfAt, paramAt, paramValueAt := int32(-1), int32(-1), int32(-1), int32(-1)
	if w.DevFallbackClass != "" {
		devAt = want(w.DevFallbackClass)
	}
	if pt := req.Perf; pt != nil {
		perfAt = want(pt.ID)
		t.perfID, t.budget = pt.ID, pt.Budget
		if pt.Param != "" {
			paramAt = want(pt.Param)
			p.perfValue = scalarOperand(pt.ParamValue)
			if s, ok := pt.ParamValue.Str(); ok {
				paramValueAt = want(s)
			}
		}
	}
	valueAt, memAt := want(AttrValue), want(AttrMemBytes)

	found := make([]int32, len(strs))
	v := syms.lookup(strs, found)
	for k, at := range predAttrAt {
		*predAttr[k] = found[at]
	}
	for _, f := range fix {
		sym := uint64(found[f.at]) // noSymbol becomes ^0: equals nothing interned
		if f.bits != nil {
			*f.bits = sym
		} else {
			p.operands[f.operand].bits = sym
		}
	}
	p.symValue, p.symMemSize = found[valueAt], found[memAt]
	if paramAt >= 0 {
		p.perfParam = found[paramAt]
		if paramValueAt >= 0 {
			p.perfValue.bits = uint64(found[paramValueAt])
		}
	}

	// The selectors: pseudo-selectors, then the common requirements, the
	// preferences, the first variant's and the later variants'.
	var sels []link
	addSel := func(at int32, req int32, exact, later bool) {
		if sym := found[at]; sym != noSymbol {
			sels = append(sels, link{req: req, sym: sym, exact: exact, later: later})
		}
	}
	if devAt >= 0 {
		addSel(devAt, selDev, true, false)
	}
	if perfAt >= 0 {
		addSel(perfAt, selPerf, true, false)
	}
	for ri := range p.reqs {
		later := ri >= p.variants[0].end && ri < p.prefStart
		addSel(selAt[ri], int32(ri), false, later)
		p.hasLater = p.hasLater || later
	}
	p.buildChains(v, sels)

	p.routes = make([][]int32, len(p.variants))
	all := make([]int32, 0, len(p.variants)*p.nCommon+p.prefStart-p.nCommon)
	for vi, va := range p.variants {
		start := len(all)
		for ri := range p.nCommon {
			all = append(all, int32(ri))
		}
		for ri := va.start; ri < va.end; ri++ {
			all = append(all, int32(ri))
		}
		p.routes[vi] = all[start:len(all):len(all)]
	}
	p.disjoint = make([]bool, len(p.variants))
	p.routeCaps = make([]int, len(p.variants))
	for vi, route := range p.routes {
		p.disjoint[vi] = true
		for _, ri := range route {
			p.routeCaps[vi] += p.reqs[ri].count
		}
		for a, ra := range route {
			for _, rb := range route[a+1:] {
				sa, sb := t.reqs[ra].sel, t.reqs[rb].sel
				if grammar.SelectorMatches(sa, sb) || grammar.SelectorMatches(sb, sa) {
					p.disjoint[vi] = false
				}
			}
		}
	}
	p.coResidency = len(req.Labels) > 0 || len(req.Excludes) > 0
	for _, l := range req.Labels {
		p.labelMask |= textBit(l)
	}
	for _, x := range req.Excludes {
		p.excludeMask |= textBit(x)
	}
	if len(req.RevocableRefs) > 0 && len(cl.RevokedRefs) > 0 {
		revoked := make(map[string]struct{}, len(cl.RevokedRefs))
		for _, r := range cl.RevokedRefs {
			revoked[r] = struct{}{}
		}
		for _, r := range req.RevocableRefs {
			if _, ok := revoked[r]; ok {
				p.revokedRef = t.str(r)
				break
			}
		}
	}
	p.perfMul = w.Perf
	if req.Interactive {
		p.perfMul *= w.InteractivePerfMultiplier
	}
	return p
}

// scalarOperand is the pval of an operand scalar; a string's symbol is
// filled in after the lookup (until then it equals nothing interned).
func scalarOperand(v grammar.Value) pval {
	e := scalar(v)
	if e.kind == grammar.KindString {
		e.bits = ^uint64(0)
	}
	return e
}

// buildChains makes plan.chain and plan.links from the selectors: one
// pass over the symbols, parents first (a symbol's parent is interned
// before it). A symbol's chain is its exact selectors, then its dot-prefix
// selectors, then its parent's dot-prefix selectors and so on: an exact
// selector selects its own id only, so children do not inherit it, and
// a scan needs no test for it.
func (p *plan) buildChains(v view, sels []link) {
	slices.SortStableFunc(sels, func(a, b link) int { return int(a.sym) - int(b.sym) })
	p.chain = make([]int32, len(v.parent))
	inherit := make([]int32, len(v.parent)) // a symbol's chain without its exact selectors
	p.links = make([]link, 0, len(sels))
	k := 0
	for s, parent := range v.parent {
		h := int32(-1)
		if parent >= 0 {
			h = inherit[parent]
		}
		end := k
		for end < len(sels) && sels[end].sym == int32(s) {
			end++
		}
		for _, exact := range [2]bool{false, true} {
			for _, l := range sels[k:end] {
				if l.exact == exact {
					l.next = h
					p.links = append(p.links, l)
					h = int32(len(p.links) - 1)
				}
			}
			if !exact {
				inherit[s] = h
			}
		}
		p.chain[s] = h
		k = end
	}
}
