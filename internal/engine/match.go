package engine

import (
	"slices"

	"github.com/nodeld/nodeld/internal/grammar"
)

// reqStat is what one scan of a node's capabilities found for one
// requirement: how far its capabilities got through the filters of
// reference 3.6.2 (selector, provenance, predicates, state, count).
type reqStat struct {
	selected int32
	provOK   int32
	predOK   int32
	usable   int32 // candidates in nodeScan.cands
	blocked  int32 // 1 + index of the first capability usable but for its state; 0 if none
	maxFail  int16 // the predicate at which the last candidates dropped out
	best     int8  // best provenance rank among the selected
}

// failure returns the kind of the requirement's failure on its own, and
// its argument, and whether it fails.
func (st *reqStat) failure(count int) (kind whyKind, a int32, fails bool) {
	usable := int(st.usable)
	switch {
	case st.selected == 0:
		return whyNotAdvertised, 0, true
	case st.provOK == 0:
		return whyProvenance, int32(st.best), true
	case st.predOK == 0:
		return whyPredicate, int32(st.maxFail), true
	case usable == 0:
		return whyUnavailable, st.blocked - 1, true
	case usable < count:
		return whyUsable, int32(usable), true
	}
	return 0, 0, false
}

// nodeScan is the per-node result of one pass over its capabilities,
// and the scratch space reused from node to node.
//
// Nothing in it is written as a pointer per capability or per node (the
// candidates' count is in the stats, not in a slice header), so that
// evaluating a node costs no write barrier while the collector marks.
type nodeScan struct {
	stats []reqStat
	// cands holds per requirement its usable capabilities, in node
	// order: the first stats[ri].usable of cands[ri].
	cands     [][]int32
	hits      []hit // the capabilities that some selector selects: the first nhits
	nhits     int
	laterDone bool // the later variants' selections are matched

	isDev   bool
	perf    float64
	hasPerf bool
}

// candsOf returns requirement ri's usable capabilities.
func (s *nodeScan) candsOf(ri int32) []int32 {
	return s.cands[ri][:s.stats[ri].usable]
}

// hit is a capability and the first link of the chain that selects it.
type hit struct{ ci, at int32 }

func newNodeScan(n int) *nodeScan {
	return &nodeScan{stats: make([]reqStat, n), cands: make([][]int32, n)}
}

// scan makes the one pass over the node's capabilities: each
// capability's id symbol gives the chain of selectors that select it. A
// first loop, which calls nothing and does not branch on the data, notes
// the capabilities that have a chain; then each chain is followed. It
// takes the selections of the pseudo-selectors, the common requirements,
// the preferences and the first variant through match, and keeps those
// of the other variants for ensure.
func (s *nodeScan) scan(p *plan, pr *Profile) {
	clear(s.stats)
	s.isDev, s.hasPerf, s.laterDone = false, false, false
	chain, links := p.chain, p.links
	idSym := pr.idSym
	if len(s.hits) < len(idSym) {
		s.hits = make([]hit, max(len(idSym), 2*len(s.hits)))
	}
	hits := selected(idSym, chain, s.hits)
	s.nhits = len(hits)
	for _, ht := range hits {
		for h := ht.at; h >= 0; {
			l := &links[h]
			h = l.next
			if !l.later {
				s.match(p, l.req, ht.ci, pr, &pr.caps[ht.ci])
			}
		}
	}
}

// selected notes in hits, and returns, the capabilities whose id has a
// chain, with its first link: a loop that calls nothing and does not
// branch on the data. hits has room for every capability.
func selected(idSym, chain []int32, hits []hit) []hit {
	hits = hits[:len(idSym)]
	n := 0
	for ci, sym := range idSym {
		h := int32(-1)
		if i := uint(uint32(sym)); i < uint(len(chain)) { // else interned after this decision began
			h = chain[i]
		}
		hits[n] = hit{ci: int32(ci), at: h}
		n += int(uint32(^h) >> 31) // 1 when h >= 0
	}
	return hits[:n]
}

// ensure matches, once, the selections of the variants after the first,
// when route selection needs variant v: the chains of the capabilities
// the scan noted are followed again for them.
func (s *nodeScan) ensure(p *plan, pr *Profile, v int) {
	if v == 0 || s.laterDone || !p.hasLater {
		return
	}
	s.laterDone = true
	links := p.links
	for _, ht := range s.hits[:s.nhits] {
		for h := ht.at; h >= 0; {
			l := &links[h]
			h = l.next
			if l.later {
				s.match(p, l.req, ht.ci, pr, &pr.caps[ht.ci])
			}
		}
	}
}

// match takes capability ci, selected by requirement (or pseudo-selector)
// ri, through the filters of reference 3.6.2.
func (s *nodeScan) match(p *plan, ri int32, ci int32, pr *Profile, c *pcap) {
	switch ri {
	case selDev:
		s.isDev = true
		return
	case selPerf:
		s.perfCandidate(p, pr, c)
		return
	}
	r := &p.reqs[ri]
	st := &s.stats[ri]
	st.selected++
	// With no minimum, every provenance passes and the best one found is
	// never reported.
	if r.minRank > 0 {
		st.best = max(st.best, c.prov)
		if int(c.prov) < r.minRank {
			return
		}
	}
	st.provOK++
	if len(r.cpreds) > 0 {
		if f := p.firstFailing(r.cpreds, pr, c); f >= 0 {
			st.maxFail = max(st.maxFail, int16(f))
			return
		}
	}
	st.predOK++
	if !usable(c.state, r.exclusive, c.flags&capExclusive != 0) {
		if st.blocked == 0 {
			st.blocked = ci + 1
		}
		return
	}
	buf := s.cands[ri]
	if int(st.usable) == len(buf) {
		buf = append(buf, 0)
		buf = buf[:cap(buf)]
		s.cands[ri] = buf
	}
	buf[st.usable] = ci
	st.usable++
}

// usable is reference 3.6.2 step 4: available yes; busy only when
// neither the requirement nor the capability is exclusive; reserved,
// degraded and unknown states never.
func usable(state uint8, reqExclusive, capExclusive bool) bool {
	switch state {
	case stateAvailable:
		return true
	case stateBusy:
		return !reqExclusive && !capExclusive
	default:
		return false
	}
}

// firstFailing returns the index of the first predicate that does not hold
// on c, or -1 when all hold.
func (p *plan) firstFailing(preds []cpred, pr *Profile, c *pcap) int {
	for i := range preds {
		pd := &preds[i]
		a := pr.attr(c, pd.attr)
		if a == nil || !p.holds(pd, pr, a) {
			return i
		}
	}
	return -1
}

// holds evaluates a compiled predicate on a prepared attribute: eq is
// loose equality, gte and lte compare numbers, in looks for the
// attribute in the operand's list, has for the operand in the
// attribute's list.
func (p *plan) holds(pd *cpred, pr *Profile, a *pattr) bool {
	switch pd.op {
	case codeGte, codeLte:
		// The operand is a number (Validate).
		v, ok := number(a.kind, a.bits)
		if !ok {
			return false
		}
		if pd.op == codeGte {
			return v >= pd.num
		}
		return v <= pd.num
	case codeEq:
		return equal(a.kind, a.bits, pd.kind, pd.bits)
	case codeIn:
		at, n := pd.bits>>32, pd.bits&(1<<32-1)
		for _, e := range p.operands[at : at+n] {
			if equal(a.kind, a.bits, e.kind, e.bits) {
				return true
			}
		}
		return false
	case codeHas:
		if a.kind != grammar.KindList {
			return false
		}
		at, n := a.bits>>32, a.bits&(1<<32-1)
		for _, e := range pr.elems[at : at+n] {
			if equal(e.kind, e.bits, pd.kind, pd.bits) {
				return true
			}
		}
		return false
	default:
		return false
	}
}

// perfCandidate folds one capability into the node's perf figure: the
// best "value" over measured capabilities with the target's id whose
// parameter matches.
func (s *nodeScan) perfCandidate(p *plan, pr *Profile, c *pcap) {
	t := p.perf
	if int(c.prov) != provenanceMeasured {
		return
	}
	if t.Param != "" {
		a := pr.attr(c, p.perfParam)
		if a == nil || !equal(a.kind, a.bits, p.perfValue.kind, p.perfValue.bits) {
			return
		}
	}
	a := pr.attr(c, p.symValue)
	if a == nil {
		return
	}
	f, ok := number(a.kind, a.bits)
	if !ok || !finitePerf(f) {
		return
	}
	switch {
	case !s.hasPerf:
		s.perf, s.hasPerf = f, true
	case t.Better == BetterLower:
		s.perf = min(s.perf, f)
	default:
		s.perf = max(s.perf, f)
	}
}

// provenanceMeasured is grammar.ProvenanceRank(grammar.ProvenanceMeasured).
const provenanceMeasured = 3

// joint finds an assignment of a node's capabilities to one route's
// requirements (reference 3.6.2 "joint matching"): each requirement gets
// Count of its candidates; a capability held exclusively (by an exclusive
// requirement, or because the capability is exclusive) serves one
// requirement once; other capabilities may be shared by any number of
// shared requirements.
//
// A greedy pass in declaration order settles the usual case (nothing
// contested) in one step per capability; when it fails, a backtracking
// search decides, bounded by MaxJointSteps.
type joint struct {
	scan *nodeScan
	caps []pcap  // the node's, for the search
	reqs []int32 // plan indices of the route's requirements, for the search

	// The chosen capabilities, per plan index ri: alen[ri] of them from
	// assignBuf[assignAt[ri]]; a requirement has room for its count.
	assignBuf []int32
	assignAt  []int32
	alen      []int32

	// Greedy pass: mark[ci] is gen<<1 for a capability used shared in
	// this pass, gen<<1|1 for one held exclusively.
	gen  uint32
	mark []uint32

	// Search.
	owner    []int32   // per capability: the requirement holding it exclusively, or -1
	contest  []int32   // per capability: how many of the route's requirements list it
	order    []int32   // requirements in search order
	sorted   [][]int32 // per plan index: candidates, least contested first
	steps    int
	searched bool // contest is valid (the search ran)
	alone    bool // the last route solved is disjoint: see aloneOf
}

func newJoint(p *plan, s *nodeScan) *joint {
	j := &joint{scan: s, assignAt: make([]int32, len(p.reqs)), alen: make([]int32, len(p.reqs)),
		sorted: make([][]int32, len(p.reqs))}
	n := int32(0)
	for ri := range p.reqs {
		j.assignAt[ri] = n
		n += int32(p.reqs[ri].count)
	}
	j.assignBuf = make([]int32, n)
	return j
}

// assignOf returns the capabilities chosen for requirement ri, by the
// last solve.
func (j *joint) assignOf(p *plan, ri int32) []int32 {
	if !j.alone {
		at := j.assignAt[ri]
		return j.assignBuf[at : at+j.alen[ri]]
	}
	r := &p.reqs[ri]
	if cands := j.scan.cands[ri]; r.exclusive || r.count == 1 && j.caps[cands[0]].flags&capExclusive == 0 {
		return cands[:r.count]
	}
	return j.aloneOf(p, ri)
}

// aloneOf returns what greedy gives requirement ri when no other
// requirement of the route selects its capabilities: its first Count
// candidates when it is exclusive; else the first Count of its shared
// candidates, then of its exclusive ones, in node order.
func (j *joint) aloneOf(p *plan, ri int32) []int32 {
	r := &p.reqs[ri]
	if r.exclusive {
		return j.scan.candsOf(ri)[:r.count]
	}
	out := j.assignBuf[j.assignAt[ri]:][:0:r.count]
	for _, pass := range [2]uint8{0, capExclusive} {
		for _, ci := range j.scan.candsOf(ri) {
			if len(out) < r.count && j.caps[ci].flags&capExclusive == pass {
				out = append(out, ci)
			}
		}
	}
	return out
}

// push adds capability ci to requirement ri's assignment.
func (j *joint) push(ri, ci int32) {
	j.assignBuf[j.assignAt[ri]+j.alen[ri]] = ci
	j.alen[ri]++
}

// solve assigns the requirements reqs, the route of variant vi, each of
// which passes alone, returning false when no assignment exists or
// MaxJointSteps ran out. A disjoint route is not matched: each
// requirement gets what it would alone, found by assignOf when asked.
func (j *joint) solve(p *plan, vi int, reqs []int32, caps []pcap) bool {
	j.searched = false
	j.alone = p.disjoint[vi]
	if j.alone {
		j.caps = caps
		return true
	}
	if j.greedy(p, reqs, caps) {
		return true
	}
	j.caps, j.reqs = caps, reqs
	return j.search(p, caps)
}

// greedy gives each requirement, in declaration order, its first usable
// candidates: shared capabilities first for a shared requirement. It
// reports false at the first requirement it cannot satisfy.
func (j *joint) greedy(p *plan, reqs []int32, caps []pcap) bool {
	if len(j.mark) < len(caps) {
		j.mark = make([]uint32, len(caps))
		j.gen = 0
	}
	j.gen++
	if j.gen == 1<<31 { // wrapped: old marks could look current
		clear(j.mark)
		j.gen = 1
	}
	mark, shared, held := j.mark[:len(caps)], j.gen<<1, j.gen<<1|1
	st, all := j.scan.stats, j.scan.cands
	for _, ri := range reqs {
		r := &p.reqs[ri]
		need := r.count
		cands := all[ri][:st[ri].usable]
		out := j.assignBuf[j.assignAt[ri]:][:need]
		n := 0
		if r.exclusive {
			for _, ci := range cands {
				if mark[ci]>>1 != j.gen {
					mark[ci] = held
					out[n] = ci
					if n++; n == need {
						break
					}
				}
			}
		} else {
			for _, ci := range cands { // shared capabilities, not held
				if caps[ci].flags&capExclusive == 0 && mark[ci] != held {
					mark[ci] = shared
					out[n] = ci
					if n++; n == need {
						break
					}
				}
			}
			if n < need {
				for _, ci := range cands { // then exclusive ones, free
					if caps[ci].flags&capExclusive != 0 && mark[ci]>>1 != j.gen {
						mark[ci] = held
						out[n] = ci
						if n++; n == need {
							break
						}
					}
				}
			}
		}
		j.alen[ri] = int32(n)
		if n < need {
			return false
		}
	}
	return true
}

// search is the complete, bounded backtracking search.
func (j *joint) search(p *plan, caps []pcap) bool {
	for _, ri := range j.reqs {
		j.alen[ri] = 0
	}
	if cap(j.owner) < len(caps) {
		j.owner = make([]int32, len(caps))
		j.contest = make([]int32, len(caps))
	}
	j.owner, j.contest = j.owner[:len(caps)], j.contest[:len(caps)]
	for i := range j.owner {
		j.owner[i], j.contest[i] = -1, 0
	}
	for _, ri := range j.reqs {
		for _, ci := range j.scan.candsOf(ri) {
			j.contest[ci]++
		}
	}
	j.searched = true
	// Exclusive requirements first, most constrained (fewest candidates)
	// first; then shared ones. Within a requirement, the least contested
	// capability first. Ties fall back to declaration and node order, so
	// the search does not depend on the order of nodes.
	j.order = append(j.order[:0], j.reqs...)
	slices.SortStableFunc(j.order, func(a, b int32) int {
		ea, eb := p.reqs[a].exclusive, p.reqs[b].exclusive
		switch {
		case ea && !eb:
			return -1
		case eb && !ea:
			return 1
		case ea:
			return int(j.scan.stats[a].usable - j.scan.stats[b].usable)
		}
		return 0
	})
	for _, ri := range j.reqs {
		j.sorted[ri] = append(j.sorted[ri][:0], j.scan.candsOf(ri)...)
		slices.SortStableFunc(j.sorted[ri], func(a, b int32) int { return int(j.contest[a] - j.contest[b]) })
	}
	j.steps = 0
	return j.place(p, 0)
}

// place assigns j.order[k:] given the assignments before k.
func (j *joint) place(p *plan, k int) bool {
	if k == len(j.order) {
		return true
	}
	ri := j.order[k]
	r := &p.reqs[ri]
	if r.exclusive {
		return j.choose(p, k, ri, r.count, 0, true)
	}
	// A shared requirement uses free shared capabilities first: they cost
	// nothing to anyone, since exclusive requirements were placed before.
	need := r.count
	base := j.alen[ri]
	for _, ci := range j.sorted[ri] {
		if need == 0 {
			break
		}
		if j.caps[ci].flags&capExclusive == 0 && j.owner[ci] < 0 {
			j.push(ri, ci)
			need--
		}
	}
	if j.choose(p, k, ri, need, 0, false) {
		return true
	}
	j.alen[ri] = base
	return false
}

// choose picks need more capabilities for requirement ri from its sorted
// candidates at or after from, holding each exclusively, then places the
// rest. A shared requirement only takes exclusive capabilities here.
func (j *joint) choose(p *plan, k int, ri int32, need, from int, exclusiveReq bool) bool {
	if need == 0 {
		return j.place(p, k+1)
	}
	list := j.sorted[ri]
	for i := from; i < len(list) && len(list)-i >= need; i++ {
		ci := list[i]
		if j.owner[ci] >= 0 || (!exclusiveReq && j.caps[ci].flags&capExclusive == 0) {
			continue
		}
		if j.steps++; j.steps > MaxJointSteps {
			return false
		}
		j.owner[ci] = ri
		j.push(ri, ci)
		if j.choose(p, k, ri, need-1, i+1, exclusiveReq) {
			return true
		}
		j.alen[ri]--
		j.owner[ci] = -1
		if j.steps > MaxJointSteps {
			return false
		}
	}
	return false
}

// competing reports whether requirement ri competes for a capability held
// exclusively: one of its candidates is listed by another of the route's
// requirements and is exclusive or listed by an exclusive requirement.
// Only meaningful after a failed solve.
func (j *joint) competing(p *plan, ri int32) bool {
	if !j.searched {
		return false
	}
	for _, ci := range j.scan.candsOf(ri) {
		if j.contest[ci] < 2 {
			continue
		}
		if j.caps[ci].flags&capExclusive != 0 || p.reqs[ri].exclusive {
			return true
		}
		for _, rj := range j.reqs {
			if rj != ri && p.reqs[rj].exclusive && slices.Contains(j.scan.candsOf(rj), ci) {
				return true
			}
		}
	}
	return false
}
