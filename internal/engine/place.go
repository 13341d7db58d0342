package engine

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

// Place decides where req goes among nodes (reference 3.6): it validates
// the request, rejects every node that fails a hard constraint (recording
// every failing one), scores the rest, ranks them by tier, then score,
// then node id, and applies the pin or prefer/avoid.
//
// It is a pure function: no clock, no I/O, no goroutines, no randomness
// and no dependence on map order or on the order of nodes. It does not
// modify its arguments, and the Decision shares no memory with them except
// strings, Values and the nodes' Profiles. Nodes given with a Profile
// (Symbols.Prepare) are not prepared again; nodes given without are
// prepared here, for this decision alone.
//
// Errors: ErrInvalidRequest (the request or weights), ErrInvalidNodes (a
// bad or repeated node id; some nodes with a Profile and some without, or
// Profiles of different Symbols), ErrUnknownPin, and *PinIneligibleError
// (matching ErrPinIneligible), which comes with the complete Decision.
// "Nothing fits" is not an error: Decision.Chosen is nil.
func Place(req Request, nodes []Node, cluster Cluster, w Weights) (Decision, error) {
	var s scratch
	return s.place(req, nodes, cluster, w)
}

// Placer decides as Place does, reusing its working memory from one
// decision to the next: the sort of the nodes by id (kept, with the ids
// it sorted, and reused while a decision is given the same node ids in
// the same order, as a caller that keeps its nodes gives them), the rank
// keys and the permutation. A decision still allocates what it returns
// (its Candidates, their rejections and assignments), which shares no
// memory with the Placer: a Decision stays valid and unchanged whatever
// the Placer decides next.
//
// The zero Placer is ready to use. A Placer is safe for concurrent use:
// one decision at a time uses its memory, others meanwhile decide with
// memory of their own, as Place does. What a Placer keeps never changes
// a decision: the same arguments give the same Decision as Place.
type Placer struct {
	mu sync.Mutex
	s  scratch
}

// Place is Place, with the Placer's memory.
func (pl *Placer) Place(req Request, nodes []Node, cluster Cluster, w Weights) (Decision, error) {
	if !pl.mu.TryLock() {
		return Place(req, nodes, cluster, w)
	}
	defer pl.mu.Unlock()
	pl.s.keep = true
	return pl.s.place(req, nodes, cluster, w)
}

// scratch is a decision's working memory that the Decision does not
// keep: Place makes it afresh, a Placer keeps it.
type scratch struct {
	keep bool // a Placer's: keep the id order for the next decision

	// The nodes' order by id, valid for the nodes whose ids are ids, in
	// that order (nil: none is kept). Only the order of valid ids is
	// kept.
	ids  []string
	byID idOrder
	rank []uint32
	elig []int32
	keys []nodeRef
	perm []int32
}

// sized returns s with length n, reusing its memory when it has room.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// order sorts the nodes by id and validates their ids, or takes the
// order it kept when the ids are those it sorted last.
func (s *scratch) order(nodes []Node) (idOrder, error) {
	if s.ids != nil && len(s.ids) == len(nodes) {
		same := true
		for i := range nodes {
			if nodes[i].ID != s.ids[i] {
				same = false
				break
			}
		}
		if same {
			return s.byID, nil
		}
	}
	s.ids = nil
	s.byID = sortByID(nodes, s.byID.refs, s.byID.tmp)
	if err := validateNodes(nodes, s.byID); err != nil {
		return idOrder{}, err
	}
	if s.keep && len(nodes) > 0 {
		ids := sized(s.ids[:0:cap(s.ids)], len(nodes))
		for i := range nodes {
			ids[i] = nodes[i].ID
		}
		s.ids = ids
	}
	return s.byID, nil
}

func (s *scratch) place(req Request, nodes []Node, cluster Cluster, w Weights) (Decision, error) {
	if err := errors.Join(req.Validate(), w.Validate()); err != nil {
		return Decision{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	// One sort by node id finds repeated ids and later orders ties and
	// rejected nodes.
	byID, err := s.order(nodes)
	if err != nil {
		return Decision{}, err
	}
	if req.Pin != "" && byID.index(nodes, req.Pin) < 0 {
		return Decision{}, fmt.Errorf("%w: %q", ErrUnknownPin, clip(req.Pin))
	}
	syms, prepared, err := profilesOf(nodes)
	if err != nil {
		return Decision{}, err
	}

	p := compile(&req, &w, &cluster, syms)
	e := newEvaluator(p, len(nodes))
	e.revoked = byID.revoked(nodes, cluster.RevokedNodes)
	// Nodes are evaluated in the order given, which is the order their
	// data lies in memory; nothing in a node's evaluation depends on
	// another node, and the order of the output is decided by the sorts
	// below alone.
	cands := make([]Candidate, len(nodes))
	eligible := sized(s.elig, len(nodes))[:0]
	// rank holds, per node index, the rank key of an eligible node (see
	// rankOrder), or rejected: the sorts below read it rather than the
	// Candidates.
	rank := sized(s.rank, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		pr := n.Profile
		if prepared != nil {
			pr = prepared[i]
		} else if pr.vocab != syms {
			return Decision{}, otherSymbols(nodes, i)
		}
		if e.evaluate(i, n, pr, &cands[i]) {
			eligible = append(eligible, int32(i))
		} else {
			rank[i] = rejected
		}
	}
	p.score(cands, eligible)
	for _, i := range eligible {
		c := &cands[i]
		rank[i] = rankOrder(c.Tier, c.Score.Total)
	}

	// Eligible first by tier, then score, then node id (its rank in
	// byID); then the rejected in node id order. The candidates are put
	// in that order in place. The eligible are taken in id order and
	// sorted stably by a key of tier and score (see rankOrder).
	keys := sized(s.keys, len(eligible))[:0]
	for k, r := range byID.refs {
		if rk := rank[r.i]; rk != rejected {
			keys = append(keys, nodeRef{key: rk, i: int32(k)})
		}
	}
	sortRefs(keys, byID.tmp)
	for lo := 0; lo < len(keys); {
		hi := lo + 1
		for hi < len(keys) && keys[hi].key == keys[lo].key {
			hi++
		}
		if hi-lo > 1 {
			// Scores alike in all but their last bit: by score exactly,
			// the order of id kept.
			slices.SortStableFunc(keys[lo:hi], func(a, b nodeRef) int {
				return cmp.Compare(cands[byID.refs[b.i].i].Score.Total, cands[byID.refs[a.i].i].Score.Total)
			})
		}
		lo = hi
	}
	perm := sized(s.perm, len(nodes))[:0] // position -> node index
	for _, k := range keys {
		perm = append(perm, byID.refs[k.i].i)
	}
	for _, r := range byID.refs {
		if rank[r.i] == rejected {
			perm = append(perm, r.i)
		}
	}
	permute(cands, perm)
	s.rank, s.elig, s.keys, s.perm = rank, eligible, keys, perm
	d := Decision{Kind: req.Kind, Name: req.Name, AllowEmulated: req.AllowEmulated, Pin: req.Pin,
		Candidates: cands}

	chosen, flag := -1, Flags(0)
	switch {
	case req.Pin != "":
		i := slices.IndexFunc(d.Candidates, func(c Candidate) bool { return c.Node == req.Pin })
		if c := &d.Candidates[i]; !c.Eligible() {
			return d, &PinIneligibleError{Node: c.Node, Rejections: c.Rejections}
		}
		chosen, flag = i, FlagPinned
	case len(eligible) > 0:
		chosen = affinity(d.Candidates[:len(eligible)], req.Prefer, req.Avoid)
		if chosen != 0 {
			flag = FlagAffinity
		}
	}
	if chosen >= 0 {
		c := &d.Candidates[chosen]
		c.Flags |= flag
		vi := slices.IndexFunc(req.Variants, func(v Variant) bool { return v.Name == c.Variant })
		d.Chosen = &Placement{
			Node: c.Node, Variant: c.Variant, Execution: req.Variants[vi].Execution, Tier: c.Tier,
			Accelerator: c.accelerator(), Score: c.Score, Flags: c.Flags,
		}
	}
	return d, nil
}

// profilesOf returns the Symbols of the nodes' Profiles. Nodes given
// with Profiles must all have one, from one Symbols; nodes given without
// are prepared here, with a Symbols of this call, and their Profiles
// returned (nil when the nodes have theirs).
//
// When every node has a Profile, the Symbols returned is the first
// node's, and the caller checks that every other Profile is of it
// (otherSymbols) as it reads them: the Profiles are read once.
func profilesOf(nodes []Node) (*Symbols, []*Profile, error) {
	given := 0
	for i := range nodes {
		if nodes[i].Profile != nil {
			given++
		}
	}
	switch {
	case given == len(nodes) && given > 0:
		return nodes[0].Profile.vocab, nil, nil
	case given > 0:
		var syms *Symbols
		for i := range nodes {
			if pr := nodes[i].Profile; pr != nil {
				if syms == nil {
					syms = pr.vocab
				} else if pr.vocab != syms {
					return nil, nil, otherSymbols(nodes, i)
				}
			}
		}
		i := slices.IndexFunc(nodes, func(n Node) bool { return n.Profile == nil })
		return nil, nil, fmt.Errorf("%w: node[%d] %q has no Profile, and others have", ErrInvalidNodes, i, clip(nodes[i].ID))
	}
	syms := NewSymbols()
	profiles := make([]*Profile, len(nodes))
	for i := range nodes {
		profiles[i] = syms.Prepare(nodes[i].Capabilities, nodes[i].Memory)
	}
	return syms, profiles, nil
}

// otherSymbols is the error for node i, whose Profile was prepared by
// another Symbols than the first node's.
func otherSymbols(nodes []Node, i int) error {
	return fmt.Errorf("%w: node[%d] %q: its Profile was prepared by another Symbols", ErrInvalidNodes, i, clip(nodes[i].ID))
}

// affinity chooses among the ranked eligible candidates: within the best
// tier only, the first preferred, else the first not avoided, else the
// first.
func affinity(ranked []Candidate, prefer, avoid []string) int {
	pool := ranked
	for i, c := range ranked {
		if c.Tier != ranked[0].Tier {
			pool = ranked[:i]
			break
		}
	}
	if len(prefer) > 0 {
		for i, c := range pool {
			if slices.Contains(prefer, c.Node) {
				return i
			}
		}
	}
	for i, c := range pool {
		if !slices.Contains(avoid, c.Node) {
			return i
		}
	}
	return 0
}

// accelerator is the first capability of the accelerator family in the
// candidate's assignment, in requirement order, or "".
func (c *Candidate) accelerator() string {
	pr, a := c.assignment()
	if pr == nil {
		return ""
	}
	r := int(a[1]) - 2
	for _, ci := range a[a[1]:a[r+1]] {
		if pr.caps[ci].flags&capAccel != 0 {
			return pr.id(ci)
		}
	}
	return ""
}

// idOrder is the nodes sorted by id. The sort compares a key made of the
// four bytes of each id that follow the prefix all the ids share, and
// the ids themselves only when the keys are equal: it reads each id once
// and sorts compact, pointer-free references.
type idOrder struct {
	refs []nodeRef
	tmp  []nodeRef // scratch for radixSort, as long as refs
	skip int       // the length of the prefix all ids share
}

// nodeRef is a node's key and index.
type nodeRef struct {
	key uint32 // id[skip:skip+4], big-endian, zero-padded
	i   int32
}

// sortByID sorts the nodes by id, in refs and tmp when they have room.
func sortByID(nodes []Node, refs, tmp []nodeRef) idOrder {
	o := idOrder{refs: sized(refs, len(nodes)), tmp: sized(tmp, len(nodes))}
	if len(nodes) == 0 {
		return o
	}
	first := nodes[0].ID
	o.skip = len(first)
	for i := 1; i < len(nodes) && o.skip > 0; i++ {
		id := nodes[i].ID
		k := 0
		for k < o.skip && k < len(id) && id[k] == first[k] {
			k++
		}
		o.skip = k
	}
	for i := range nodes {
		o.refs[i] = nodeRef{key: idKey(nodes[i].ID[o.skip:]), i: int32(i)}
	}
	// A zero-padded key orders like the id: a shorter id that is a prefix
	// of a longer one sorts first either way, whatever bytes they hold.
	// Keys are sorted by radix, a byte at a time from the last, skipping
	// the bytes all keys share; the sort is stable, so equal keys stay in
	// the order of index, and only runs of equal keys (ids alike in their
	// first four distinct bytes) are sorted again by id. Equal ids (an
	// error) keep their order of index.
	sortRefs(o.refs, o.tmp)
	for lo := 0; lo < len(o.refs); {
		hi := lo + 1
		for hi < len(o.refs) && o.refs[hi].key == o.refs[lo].key {
			hi++
		}
		if hi-lo > 1 {
			slices.SortStableFunc(o.refs[lo:hi], func(a, b nodeRef) int {
				return strings.Compare(nodes[a.i].ID, nodes[b.i].ID)
			})
		}
		lo = hi
	}
	return o
}

// sortRefs sorts refs by key, then index: by radix, which is stable, for
// refs given in order of index; by comparison below radixMin. tmp is
// scratch space at least as long as refs.
func sortRefs(refs, tmp []nodeRef) {
	if len(refs) < radixMin {
		slices.SortFunc(refs, func(a, b nodeRef) int {
			if c := cmp.Compare(a.key, b.key); c != 0 {
				return c
			}
			return cmp.Compare(a.i, b.i)
		})
		return
	}
	radixSort(refs, tmp)
}

// radixMin is the fewest nodes sorted by radix: below it, the passes'
// fixed cost exceeds a comparison sort's.
const radixMin = 256

// radixSort sorts refs by key, stably: one pass counts every byte of
// every key, then one pass per byte that varies places them, from the
// last byte to the first. tmp is scratch space at least as long as refs.
func radixSort(refs, tmp []nodeRef) {
	if len(refs) < 2 {
		return
	}
	var count [4][256]int32
	and, or := ^uint32(0), uint32(0)
	for _, r := range refs {
		k := r.key
		and &= k
		or |= k
		count[0][k&0xff]++
		count[1][k>>8&0xff]++
		count[2][k>>16&0xff]++
		count[3][k>>24]++
	}
	src, dst := refs, tmp[:len(refs)]
	for d := range 4 {
		if (and^or)>>(8*d)&0xff == 0 {
			continue // every key has the same byte here
		}
		at := &count[d]
		sum := int32(0)
		for b := range at {
			at[b], sum = sum, sum+at[b]
		}
		for _, r := range src {
			b := r.key >> (8 * d) & 0xff
			dst[at[b]] = r
			at[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &refs[0] {
		copy(refs, src)
	}
}

// idKey returns the first four bytes of s, big-endian, zero-padded.
func idKey(s string) uint32 {
	if len(s) >= 4 {
		return uint32(s[0])<<24 | uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3])
	}
	var k uint32
	for i := range 4 {
		k <<= 8
		if i < len(s) {
			k |= uint32(s[i])
		}
	}
	return k
}

// index returns the index of the node with this id, or -1.
func (o idOrder) index(nodes []Node, id string) int {
	if len(o.refs) == 0 || !strings.HasPrefix(id, nodes[0].ID[:o.skip]) {
		return -1
	}
	key := idKey(id[o.skip:])
	k, found := slices.BinarySearchFunc(o.refs, id, func(r nodeRef, id string) int {
		switch {
		case r.key < key:
			return -1
		case r.key > key:
			return 1
		}
		return strings.Compare(nodes[r.i].ID, id)
	})
	if !found {
		return -1
	}
	return int(o.refs[k].i)
}

// revoked marks the nodes whose ids are listed, or returns nil when none
// is.
func (o idOrder) revoked(nodes []Node, ids []string) []bool {
	var marks []bool
	for _, id := range ids {
		if i := o.index(nodes, id); i >= 0 {
			if marks == nil {
				marks = make([]bool, len(nodes))
			}
			marks[i] = true
		}
	}
	return marks
}

// rankOrder is an eligible candidate's key for ranking: the tier in the
// top two bits, then the score, highest first (the bits of a float64 of
// zero or more order like the number; inverted, they order the other
// way), to 30 bits: the exponent and 18 bits of the fraction. Equal keys
// are resolved by score exactly.
func rankOrder(t Tier, score float64) uint32 {
	// t is at most TierDevFallback: no key is rejected.
	return uint32(t)<<30 | uint32((^math.Float64bits(score)&(1<<63-1))>>33)
}

// rejected is the rank key of a rejected node: above every rankOrder,
// whose top two bits are a tier.
const rejected = ^uint32(0)

// permute reorders cs in place so that position k holds what was at
// perm[k]; perm is consumed.
func permute(cs []Candidate, perm []int32) {
	for k := range perm {
		if perm[k] < 0 || int(perm[k]) == k {
			continue
		}
		tmp := cs[k]
		j := k
		for {
			next := int(perm[j])
			perm[j] = -1
			if next == k {
				cs[j] = tmp
				break
			}
			cs[j] = cs[next]
			j = next
		}
	}
}

// What phase B needs of an eligible node beyond its score's locality and
// load, what it compares across the survivors, phase A keeps in its
// Candidate until phase B replaces it, so that it takes no memory of its
// own: Score.AccelFit holds the summed mem_bytes of the assigned
// accelerators (0 when unknown), Score.Perf the node's perf figure, and
// these bits of Flags, above the exported ones, say what holds.
const (
	rawAccelAssigned Flags = 1 << (7 - iota) // an accel.* capability was assigned
	rawHasAccel                              // the node has any accel.* capability (known when none was assigned)
	rawHasPerf                               // Score.Perf holds a measurement
	rawFlags         = rawAccelAssigned | rawHasAccel | rawHasPerf
)

// evaluator runs phase A node by node, reusing its scratch space.
type evaluator struct {
	p       *plan
	pr      *Profile // the node's, while it is evaluated
	scan    *nodeScan
	joint   *joint
	rej     []Rejection
	revoked []bool // per node index, when any node is revoked

	// The assignment of an emulated route kept while later variants are
	// tried, flattened: route requirement k has kept[keptAt[k]:keptAt[k+1]].
	kept   []int32
	keptAt []int32
	// The chosen route: its requirements, and whether its assignment is
	// kept (else it is the joint matcher's last).
	chosen   []int32
	fromKept bool

	rejections arena[Rejection]
	blocks     assignArena
}

func newEvaluator(p *plan, nodes int) *evaluator {
	scan := newNodeScan(len(p.reqs))
	p.t.figs = newFigStore(nodes)
	return &evaluator{
		p: p, scan: scan, joint: newJoint(p, scan),
		rejections: arena[Rejection]{nodes: nodes},
		blocks:     assignArena{nodes: nodes},
	}
}

// evaluate fills c for node i, with profile pr: its rejections, or its
// route and the phase B inputs of an eligible node (rawFlags); it reports
// whether the node is eligible.
func (e *evaluator) evaluate(i int, n *Node, pr *Profile, c *Candidate) bool {
	p := e.p
	req := p.req
	e.rej = e.rej[:0]
	c.Node = n.ID

	if e.revoked != nil && e.revoked[i] {
		e.reject(CodeNodeRevoked, why{t: p.t, a: fixedNodeRevoked})
	}
	switch n.Liveness {
	case Alive:
	case Suspect:
		e.reject(CodeLiveness, why{t: p.t, a: fixedSuspect})
	case Dead:
		e.reject(CodeLiveness, why{t: p.t, a: fixedDead})
	default:
		e.reject(CodeLiveness, why{t: p.t, a: fixedLivenessUnknown})
	}
	if n.FactsExpired {
		e.reject(CodeFactsExpired, why{t: p.t, a: fixedFactsExpired})
	}
	if n.Trust < req.MinTrust {
		t := n.Trust
		if t > TrustPinned {
			t = TrustNone
		}
		e.reject(CodeTrust, why{t: p.t, kind: whyTrust, a: int32(t)})
	}
	if p.revokedRef >= 0 {
		e.reject(CodeWorkloadRevoked, why{t: p.t, kind: whyRevokedRef, a: p.revokedRef})
	}
	if p.coResidency && len(n.Instances) > 0 {
		if c := p.coResidencyOf(n.Instances); c >= 0 {
			e.reject(CodeCoResidency, why{t: p.t, kind: whyConflict, a: c})
		}
	}

	s := e.scan
	e.pr = pr
	s.scan(p, pr)
	variant, tier := e.route(n, pr)

	switch n.Gate {
	case VerdictAllow:
	case VerdictDeny:
		if n.GateReason == "" {
			e.reject(CodeGate, why{t: p.t, a: fixedGateDenied})
		} else {
			e.reject(CodeGate, why{t: p.t, kind: whyGate, a: p.t.str(n.GateReason)})
		}
	default:
		e.reject(CodeGate, why{t: p.t, a: fixedNoGate})
	}
	if t := p.perf; t != nil && t.HasBudget && s.hasPerf {
		if (t.Better == BetterLower && s.perf > t.Budget) || (t.Better == BetterHigher && s.perf < t.Budget) {
			e.reject(CodePerfBudget, why{t: p.t, kind: whyPerf, a: p.t.figs.add(math.Float64bits(s.perf))})
		}
	}

	if len(e.rej) > 0 {
		c.Rejections = e.rejections.take(len(e.rej), i)
		copy(c.Rejections, e.rej)
		return false
	}

	c.Variant, c.Tier = p.t.variants[variant], tier
	if tier == TierEmulated {
		c.Flags |= FlagEmulated
	}
	if s.hasPerf {
		c.Score.Perf = s.perf
		c.Flags |= rawHasPerf
	}
	if len(pr.caps) > 0 {
		load := float64(pr.busy) / float64(len(pr.caps))
		c.Score.Load = p.w.Load * (1 - min(max(load, 0), 1))
	} else {
		c.Flags |= FlagLoadUnknown
	}
	// The assignment, by capability index, per route requirement; and
	// the capacity of the distinct accelerators in it.
	// Each requirement of a route that fits gets exactly its count.
	route := e.chosen
	blk, start := e.blocks.take(len(route)+2+p.routeCaps[variant], i)
	idx := blk.idx[start:]
	idx[0] = int32(len(blk.prs))
	blk.prs = append(blk.prs, pr)
	at := len(route) + 2
	var capacity float64
	unknown := false
	for k := range route {
		idx[k+1] = int32(at)
		for _, ci := range e.assigned(k) {
			idx[at] = ci
			at++
			cp := &pr.caps[ci]
			if cp.flags&capAccel == 0 || slices.Contains(idx[len(route)+2:at-1], ci) {
				continue
			}
			c.Flags |= rawAccelAssigned
			if mb := pr.attr(cp, p.symMemSize); mb != nil {
				if f, ok := number(mb.kind, mb.bits); ok && f > 0 && !math.IsInf(f, 0) {
					capacity += f
					continue
				}
			}
			unknown = true
		}
	}
	idx[len(route)+1] = int32(at)
	c.assigned, c.assignAt = blk, int32(start)
	if !unknown {
		c.Score.AccelFit = capacity
	}
	if c.Flags&rawAccelAssigned == 0 && pr.accel {
		c.Flags |= rawHasAccel
	}
	for i := p.prefStart; i < len(p.reqs); i++ {
		if int(s.stats[i].usable) >= p.reqs[i].count {
			c.Score.Locality += req.Preferences[i-p.prefStart].Weight
		}
	}
	return true
}

// assigned returns what the chosen route gives its requirement k.
func (e *evaluator) assigned(k int) []int32 {
	if e.fromKept {
		return e.kept[e.keptAt[k]:e.keptAt[k+1]]
	}
	return e.joint.assignOf(e.p, e.chosen[k])
}

func (e *evaluator) reject(code Code, w why) {
	e.rej = append(e.rej, Rejection{Code: code, why: w})
}

// route is reference 3.6.2 route selection: the first native variant
// that fits, else the first emulated one when allowed. It leaves the
// chosen route for assigned. Only when no route is chosen does it go
// through the variants again to record why each fails.
func (e *evaluator) route(n *Node, pr *Profile) (variant int, tier Tier) {
	p, s := e.p, e.scan
	commonOK := p.allPass(s.stats, 0, p.nCommon)
	native, emulated, emulatedFit := -1, -1, int32(0)
	mem := pr.mem
	for _, r := range n.Pending {
		mem.pendHost = satAdd(mem.pendHost, r.HostBytes)
		mem.pendAccel = satAdd(mem.pendAccel, r.AccelBytes)
	}
	for vi := 0; vi < len(p.variants) && commonOK; vi++ {
		v := &p.variants[vi]
		s.ensure(p, pr, vi)
		if !p.allPass(s.stats, v.start, v.end) || !mem.fits(v) || !e.jointly(vi, pr.caps, false) {
			continue
		}
		if !v.emulated {
			native = vi
			break
		}
		emulatedFit |= 1 << vi
		if emulated < 0 {
			emulated = vi
			e.keep(vi)
		}
	}
	switch {
	case native >= 0:
		// The last joint match is the native route's.
		e.chosen, e.fromKept = p.routes[native], false
		if s.isDev {
			return native, TierDevFallback
		}
		return native, TierNative
	case emulated >= 0 && p.req.AllowEmulated:
		e.chosen, e.fromKept = p.routes[emulated], true
		return emulated, TierEmulated
	}

	// No route: record every failure.
	memAt := int32(-1) // the node's memory figures in texts.figs, once kept
	for ri := range p.nCommon {
		e.requirementPasses(ri, true)
	}
	for vi := range p.variants {
		v := &p.variants[vi]
		s.ensure(p, pr, vi)
		ok := commonOK
		for ri := v.start; ri < v.end; ri++ {
			ok = e.requirementPasses(ri, true) && ok
		}
		if ok {
			e.jointly(vi, pr.caps, true)
		}
		e.recordMemory(&mem, vi, &memAt)
	}
	if emulated >= 0 {
		e.reject(CodeEmulationNotAllowed, why{t: p.t, kind: whyEmulation, a: emulatedFit})
	}
	return -1, 0
}

// passes reports whether requirement ri passes on its own: it has Count
// usable capabilities, which passed every filter before.
func (e *evaluator) passes(ri int) bool {
	return e.scan.stats[ri].usable >= e.p.counts[ri]
}

// allPass reports whether requirements lo to hi-1 all pass on their own.
func (p *plan) allPass(stats []reqStat, lo, hi int) bool {
	counts := p.counts[lo:hi]
	stats = stats[lo:hi]
	for k, c := range counts {
		if stats[k].usable < c {
			return false
		}
	}
	return true
}

// requirementPasses reports whether requirement ri passes on its own,
// recording its failure when record is set.
func (e *evaluator) requirementPasses(ri int, record bool) bool {
	if e.passes(ri) {
		return true
	}
	if !record {
		return false
	}
	kind, a, _ := e.scan.stats[ri].failure(e.p.reqs[ri].count)
	w := why{t: e.p.t, kind: kind, req: int16(ri), a: a}
	code := CodeRequirements
	switch kind {
	case whyProvenance:
		code = CodeProvenance
	case whyUnavailable:
		// a is the first capability blocked by its state.
		w.a = int32(e.pr.caps[a].state) - int32(stateBusy)
		if e.pr.caps[a].state == stateOther {
			w.a = -1 - e.p.t.str(e.pr.odd[a])
		}
	}
	e.reject(code, w)
	return false
}

// jointly matches the common requirements and variant vi's together,
// recording a contention failure when record is set.
func (e *evaluator) jointly(vi int, caps []pcap, record bool) bool {
	p, j := e.p, e.joint
	reqs := p.routes[vi]
	if j.solve(p, vi, reqs, caps) {
		return true
	}
	if !record {
		return false
	}
	any := false
	for _, ri := range reqs {
		if j.competing(p, ri) {
			e.reject(CodeRequirements, why{t: p.t, kind: whyContended, req: int16(ri), a: int32(vi)})
			any = true
		}
	}
	if !any {
		for _, ri := range reqs {
			e.reject(CodeRequirements, why{t: p.t, kind: whyContended, req: int16(ri), a: int32(vi)})
		}
	}
	return false
}

// keep saves the joint assignment of variant vi's route, while later
// variants are tried.
func (e *evaluator) keep(vi int) {
	j := e.joint
	e.kept = e.kept[:0]
	e.keptAt = append(e.keptAt[:0], 0)
	for _, ri := range e.p.routes[vi] {
		e.kept = append(e.kept, j.assignOf(e.p, ri)...)
		e.keptAt = append(e.keptAt, int32(len(e.kept)))
	}
}

// memory is a node's pools and what pending placements already hold.
type memory struct {
	unified             bool
	host, vram          uint64
	pendHost, pendAccel uint64
}

// fits reports whether variant v's demand, with pending reservations,
// fits the node's pools.
func (m *memory) fits(v *variantPlan) bool {
	if m.unified {
		return poolFits(v.res.HostBytes, v.res.AccelBytes, satAdd(m.pendHost, m.pendAccel), m.host)
	}
	return poolFits(v.res.HostBytes, 0, m.pendHost, m.host) && poolFits(0, v.res.AccelBytes, m.pendAccel, m.vram)
}

// recordMemory records each pool that variant v's demand, with pending
// reservations, does not fit.
// The node's figures are kept in the decision's once, at memAt (-1
// until then): pending host and accel bytes, free host and vram bytes.
func (e *evaluator) recordMemory(m *memory, vi int, memAt *int32) {
	v := &e.p.variants[vi]
	if m.unified {
		e.recordPool(m, vi, poolUnified, v.res.HostBytes, v.res.AccelBytes, satAdd(m.pendHost, m.pendAccel), m.host, memAt)
	} else {
		e.recordPool(m, vi, poolSystem, v.res.HostBytes, 0, m.pendHost, m.host, memAt)
		e.recordPool(m, vi, poolVRAM, 0, v.res.AccelBytes, m.pendAccel, m.vram, memAt)
	}
}

// recordPool records that variant vi's demand of host and accel bytes,
// with pending, does not fit a pool, if so.
func (e *evaluator) recordPool(m *memory, vi, pool int, host, accel, pending, free uint64, memAt *int32) {
	if poolFits(host, accel, pending, free) {
		return
	}
	t := e.p.t
	if *memAt < 0 {
		*memAt = t.figs.add(m.pendHost, m.pendAccel, m.host, m.vram)
	}
	e.reject(CodeMemory, why{t: t, kind: whyMemory, req: int16(vi), a: *memAt<<2 | int32(pool)})
}

// poolFits reports whether a demand of host and accel bytes, with
// pending, fits free; no demand always fits.
func poolFits(host, accel, pending, free uint64) bool {
	return host == 0 && accel == 0 || fits(free, host, accel, pending)
}

// fits reports whether a + b + c <= free, without overflow. A saturated
// pending sum never fits alongside a non-zero demand.
func fits(free, a, b, c uint64) bool {
	if a > free {
		return false
	}
	free -= a
	if b > free {
		return false
	}
	return c <= free-b
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// coResidencyOf keeps in texts.conflicts why an instance on the node
// conflicts with the request, and returns its index there, or -1 when
// none does: the first instance (in the node's order) that carries a
// label the request excludes, or excludes one of its labels. A label is
// looked for in the request's lists only when its length and first byte
// are in the list's mask.
func (p *plan) coResidencyOf(instances []Instance) int32 {
	req := p.req
	for k := range instances {
		in := &instances[k]
		if sameText(in.Name, req.Name) && sameText(in.Kind, req.Kind) {
			continue // the workload's own instance is not a neighbour
		}
		for _, l := range in.Labels {
			if p.excludeMask&textBit(l) != 0 && containsText(req.Excludes, l) {
				return p.t.conflict(conflict{kind: in.Kind, name: in.Name, label: l})
			}
		}
		for _, x := range in.Excludes {
			if p.labelMask&textBit(x) != 0 && containsText(req.Labels, x) {
				return p.t.conflict(conflict{kind: in.Kind, name: in.Name, label: x, theyExclude: true})
			}
		}
	}
	return -1
}

// textBit is a text's bit in a 64-bit mask of texts, from its length and
// first byte.
func textBit(s string) uint64 {
	if s == "" {
		return 1
	}
	return 1 << ((uint(len(s))*7 + uint(s[0])) & 63)
}

// sameText is a == b, with the length and the first byte compared
// before the bytes: texts that differ mostly differ there.
func sameText(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || a[0] == b[0]) && a == b
}

// containsText is slices.Contains(list, s) by sameText.
func containsText(list []string, s string) bool {
	for _, x := range list {
		if sameText(x, s) {
			return true
		}
	}
	return false
}

// assignArena hands out room for assignments in shared blocks, as arena
// does slices.
type assignArena struct {
	blk   *assignBlock
	nodes int // nodes in the decision
	used  int // elements handed out
	taken int // assignments handed out
}

// take returns a block and where n elements for node i start in it,
// with room for its Profile in prs.
func (a *assignArena) take(n, i int) (*assignBlock, int) {
	if b := a.blk; b == nil || cap(b.idx)-len(b.idx) < n || len(b.prs) == cap(b.prs) {
		a.blk = &assignBlock{idx: make([]int32, 0, max(n, chunkSize(a.used, a.nodes, i))),
			prs: make([]*Profile, 0, max(1, chunkSize(a.taken, a.nodes, i)))}
	}
	b := a.blk
	l := len(b.idx)
	b.idx = b.idx[:l+n]
	a.used += n
	a.taken++
	return b, l
}

// chunkSize is the size of a new chunk of an arena that handed out used
// elements to nodes 0 to i-1 of nodes: what they took, for each node
// left, and an eighth; at most four times what was taken so far.
func chunkSize(used, nodes, i int) int {
	if used == 0 {
		return 32
	}
	left := nodes - i
	est := used * left / max(i, 1)
	return min(est+est/8, 4*used)
}

// arena hands out slices carved from shared chunks, so that a decision
// over many nodes makes a few large allocations rather than one per node.
// A chunk is sized by what the nodes evaluated so far took, times the
// nodes left, so that little is left over. Carved slices have their
// capacity clipped: appending to one never writes into another.
type arena[T any] struct {
	buf   []T
	nodes int // nodes in the decision
	used  int // elements handed out
}

// take returns n elements for node i.
func (a *arena[T]) take(n, i int) []T {
	if n == 0 {
		return nil
	}
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]T, 0, max(n, chunkSize(a.used, a.nodes, i)))
	}
	l := len(a.buf)
	a.buf = a.buf[:l+n]
	a.used += n
	return a.buf[l : l+n : l+n]
}
