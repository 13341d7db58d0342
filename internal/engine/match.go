package engine

import (
	"slices"

	"github.com/nodeld/nodeld/internal/grammar"
)

// reqStat is what one scan of a node's capabilities found for one
// requirement: how far its capabilities got through the filters of
// reference 3.6.2 (selector, provenance, predicates, state, count).
type reqStat struct {
	selected int
	best     int // best provenance rank among the selected
	provOK   int
	maxFail  int // the predicate at which the last candidates dropped out
	predOK   int
	blocked  string // state of the first capability usable but for its state
	nonExcl  int    // usable capabilities that are not exclusive
}

// failure returns the memo key of the requirement's failure on its own,
// and whether it fails; an unknown blocking state is returned as text.
func (st *reqStat) failure(ri int, usable, count int) (k msgKey, unknownState string, fails bool) {
	k.req = int32(ri)
	switch {
	case st.selected == 0:
		k.kind = msgNotAdvertised
	case st.provOK == 0:
		k.kind, k.a = msgProvenance, int32(st.best)
	case st.predOK == 0:
		k.kind, k.a = msgPredicate, int32(st.maxFail)
	case usable == 0:
		k.kind = msgUnavailable
		i := slices.Index(blockingStates[:], st.blocked)
		if i < 0 {
			return k, st.blocked, true
		}
		k.a = int32(i)
	case usable < count:
		k.kind, k.a = msgUsable, int32(usable)
	default:
		return k, "", false
	}
	return k, "", true
}

// nodeScan is the per-node result of one pass over its capabilities,
// and the scratch space reused from node to node.
type nodeScan struct {
	stats []reqStat
	cands [][]int32 // per requirement: usable capabilities, in node order

	busy      int
	isDev     bool
	hasAccel  bool
	perf      float64
	hasPerf   bool
	perfCount int
}

func newNodeScan(n int) *nodeScan {
	return &nodeScan{stats: make([]reqStat, n), cands: make([][]int32, n)}
}

// scan makes one pass over the node's capabilities: load, the dev class,
// accelerators, the perf figure, and every requirement's candidates.
func (s *nodeScan) scan(p *plan, caps []Capability) {
	for i := range s.stats {
		s.stats[i] = reqStat{maxFail: -1}
		s.cands[i] = s.cands[i][:0]
	}
	s.busy, s.isDev, s.hasAccel, s.hasPerf = 0, false, false, false
	devClass := p.w.DevFallbackClass
	for ci := range caps {
		c := &caps[ci]
		id := c.ID
		if id == "" {
			continue
		}
		state := c.State
		if state == grammar.StateBusy || state == grammar.StateReserved {
			s.busy++
		}
		if id == devClass {
			s.isDev = true
		}
		if grammar.SelectorMatches(accelFamily, id) {
			s.hasAccel = true
		}
		if p.perf != nil && id == p.perf.ID {
			s.perfCandidate(p.perf, c)
		}
		for _, ri := range p.candidatesFor(id[0]) {
			r := &p.reqs[ri]
			if !grammar.SelectorMatches(r.sel, id) {
				continue
			}
			st := &s.stats[ri]
			st.selected++
			rank, _ := grammar.ProvenanceRank(c.Provenance)
			st.best = max(st.best, rank)
			if rank < r.minRank {
				continue
			}
			st.provOK++
			if f := firstFailing(r.preds, c); f >= 0 {
				st.maxFail = max(st.maxFail, f)
				continue
			}
			st.predOK++
			if !usable(state, r.exclusive, c.Exclusive) {
				if st.blocked == "" {
					st.blocked = state
				}
				continue
			}
			s.cands[ri] = append(s.cands[ri], int32(ci))
			if !c.Exclusive {
				st.nonExcl++
			}
		}
	}
}

// usable is reference 3.6.2 step 4: available yes; busy only when
// neither the requirement nor the capability is exclusive; reserved,
// degraded and unknown states never.
func usable(state string, reqExclusive, capExclusive bool) bool {
	switch state {
	case "", grammar.StateAvailable:
		return true
	case grammar.StateBusy:
		return !reqExclusive && !capExclusive
	default:
		return false
	}
}

// firstFailing returns the index of the first predicate that does not hold
// on c, or -1 when all hold.
func firstFailing(preds []Predicate, c *Capability) int {
	for i := range preds {
		pr := &preds[i]
		v, ok := attr(c, pr.Attr)
		if !ok || !holds(pr.Op, v, pr.Value) {
			return i
		}
	}
	return -1
}

func attr(c *Capability, name string) (Value, bool) {
	for i := range c.Attrs {
		if c.Attrs[i].Name == name {
			return c.Attrs[i].Value, true
		}
	}
	return Value{}, false
}

// perfCandidate folds one capability into the node's perf figure: the
// best "value" over measured capabilities with the target's id whose
// parameter matches.
func (s *nodeScan) perfCandidate(t *PerfTarget, c *Capability) {
	if c.Provenance != grammar.ProvenanceMeasured {
		return
	}
	if t.Param != "" {
		v, ok := attr(c, t.Param)
		if !ok || !v.equal(t.ParamValue) {
			return
		}
	}
	v, ok := attr(c, AttrValue)
	if !ok {
		return
	}
	f, ok := v.number()
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

// joint finds an assignment of a node's capabilities to one route's
// requirements (reference 3.6.2 "joint matching"): each requirement gets
// Count of its candidates; a capability held exclusively (by an exclusive
// requirement, or because the capability is exclusive) serves one
// requirement once; other capabilities may be shared by any number of
// shared requirements.
type joint struct {
	caps  []Capability
	reqs  []int32   // plan indices of the route's requirements
	cands [][]int32 // per plan index (nodeScan.cands)

	assign  [][]int32 // per plan index: the chosen capabilities
	owner   []int32   // per capability: the requirement holding it exclusively, or -1
	contest []int32   // per capability: how many of the route's requirements list it
	order   []int32   // requirements in search order
	sorted  [][]int32 // per plan index: candidates, least contested first
	steps   int
}

func newJoint(nreqs int) *joint {
	return &joint{assign: make([][]int32, nreqs), sorted: make([][]int32, nreqs)}
}

// solve assigns the requirements in j.reqs, returning false when no
// assignment exists or MaxJointSteps ran out.
func (j *joint) solve(p *plan, s *nodeScan, caps []Capability) bool {
	j.caps, j.cands = caps, s.cands
	for _, ri := range j.reqs {
		j.assign[ri] = j.assign[ri][:0]
	}
	// Fast path: with no exclusive requirement and enough shared
	// capabilities for each, nothing competes.
	fast := true
	for _, ri := range j.reqs {
		r := &p.reqs[ri]
		if r.exclusive || s.stats[ri].nonExcl < r.count {
			fast = false
			break
		}
	}
	if fast {
		for _, ri := range j.reqs {
			need := p.reqs[ri].count
			for _, ci := range s.cands[ri] {
				if need == 0 {
					break
				}
				if !caps[ci].Exclusive {
					j.assign[ri] = append(j.assign[ri], ci)
					need--
				}
			}
		}
		return true
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
		for _, ci := range s.cands[ri] {
			j.contest[ci]++
		}
	}
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
			return len(s.cands[a]) - len(s.cands[b])
		}
		return 0
	})
	for _, ri := range j.reqs {
		j.sorted[ri] = append(j.sorted[ri][:0], s.cands[ri]...)
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
	base := len(j.assign[ri])
	for _, ci := range j.sorted[ri] {
		if need == 0 {
			break
		}
		if !j.caps[ci].Exclusive && j.owner[ci] < 0 {
			j.assign[ri] = append(j.assign[ri], ci)
			need--
		}
	}
	if j.choose(p, k, ri, need, 0, false) {
		return true
	}
	j.assign[ri] = j.assign[ri][:base]
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
		if j.owner[ci] >= 0 || (!exclusiveReq && !j.caps[ci].Exclusive) {
			continue
		}
		if j.steps++; j.steps > MaxJointSteps {
			return false
		}
		j.owner[ci] = ri
		j.assign[ri] = append(j.assign[ri], ci)
		if j.choose(p, k, ri, need-1, i+1, exclusiveReq) {
			return true
		}
		j.assign[ri] = j.assign[ri][:len(j.assign[ri])-1]
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
// Only meaningful after a failed solve outside the fast path.
func (j *joint) competing(p *plan, ri int32) bool {
	for _, ci := range j.cands[ri] {
		if j.contest[ci] < 2 {
			continue
		}
		if j.caps[ci].Exclusive || p.reqs[ri].exclusive {
			return true
		}
		for _, rj := range j.reqs {
			if rj != ri && p.reqs[rj].exclusive && slices.Contains(j.cands[rj], ci) {
				return true
			}
		}
	}
	return false
}
