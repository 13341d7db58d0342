package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Place decides where req goes among nodes (reference 3.6): it validates
// the request, rejects every node that fails a hard constraint (recording
// every failing one), scores the rest, ranks them by tier, then score,
// then node id, and applies the pin or prefer/avoid.
//
// It is a pure function: no clock, no I/O, no goroutines, no randomness
// and no dependence on map order or on the order of nodes. It does not
// modify its arguments, and the Decision shares no memory with them except
// strings.
//
// Errors: ErrInvalidRequest (the request or weights), ErrInvalidNodes (a
// bad or repeated node id), ErrUnknownPin, and *PinIneligibleError
// (matching ErrPinIneligible), which comes with the complete Decision.
// "Nothing fits" is not an error: Decision.Chosen is nil.
func Place(req Request, nodes []Node, cluster Cluster, w Weights) (Decision, error) {
	if err := errors.Join(req.Validate(), w.Validate()); err != nil {
		return Decision{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	// One sort by node id finds repeated ids and later orders ties and
	// rejected nodes.
	byID := sortByID(nodes)
	if err := validateNodes(nodes, byID); err != nil {
		return Decision{}, err
	}
	if req.Pin != "" && !byID.contains(nodes, req.Pin) {
		return Decision{}, fmt.Errorf("%w: %q", ErrUnknownPin, clip(req.Pin))
	}

	p := compile(&req, &w, &cluster)
	e := newEvaluator(p, len(nodes))
	// Nodes are evaluated in the order given, which is the order their
	// data lies in memory; nothing in a node's evaluation depends on
	// another node, and the order of the output is decided by the sorts
	// below alone.
	cands := make([]Candidate, len(nodes))
	eligible := make([]raw, 0, len(nodes))
	for i := range nodes {
		if r, ok := e.evaluate(&nodes[i], &cands[i]); ok {
			r.cand = int32(i)
			eligible = append(eligible, r)
		}
	}
	p.score(cands, eligible)

	// Eligible first by tier, then score, then node id (its rank in
	// byID); then the rejected in node id order. The candidates are put
	// in that order in place.
	perm := make([]int32, len(nodes)) // node index -> rank by id, then position -> node index
	for k, r := range byID.refs {
		perm[r.i] = int32(k)
	}
	keys := make([]rankKey, len(eligible))
	for k := range eligible {
		i := eligible[k].cand
		keys[k] = rankKey{score: cands[i].Score.Total, tier: cands[i].Tier, rank: perm[i], i: i}
	}
	slices.SortFunc(keys, func(a, b rankKey) int {
		switch {
		case a.tier != b.tier:
			return int(a.tier) - int(b.tier)
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return int(a.rank - b.rank)
	})
	perm = perm[:0]
	for _, k := range keys {
		perm = append(perm, k.i)
	}
	for _, r := range byID.refs {
		if !cands[r.i].Eligible() {
			perm = append(perm, r.i)
		}
	}
	permute(cands, perm)
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
			Accelerator: firstAccelerator(c.Assigned), Score: c.Score, Flags: c.Flags,
		}
	}
	return d, nil
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

func firstAccelerator(assigned [][]string) string {
	for _, ids := range assigned {
		for _, id := range ids {
			if grammar.SelectorMatches(accelFamily, id) {
				return id
			}
		}
	}
	return ""
}

// idOrder is the nodes sorted by id. The sort compares a key made of the
// eight bytes of each id that follow the prefix all the ids share, and
// the ids themselves only when the keys are equal: it reads each id once
// and sorts compact, pointer-free references.
type idOrder struct {
	refs []nodeRef
	skip int // the length of the prefix all ids share
}

// nodeRef is a node's key and index.
type nodeRef struct {
	key uint64 // id[skip:skip+8], big-endian, zero-padded
	i   int32
}

func sortByID(nodes []Node) idOrder {
	o := idOrder{refs: make([]nodeRef, len(nodes))}
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
	// first eight distinct bytes) are sorted again by id. Equal ids (an
	// error) keep their order of index.
	radixSort(o.refs)
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

// radixSort sorts refs by key, stably: one pass counts every byte of
// every key, then one pass per byte that varies places them, from the
// last byte to the first.
func radixSort(refs []nodeRef) {
	if len(refs) < 2 {
		return
	}
	var count [8][256]int32
	and, or := ^uint64(0), uint64(0)
	for _, r := range refs {
		k := r.key
		and &= k
		or |= k
		count[0][k&0xff]++
		count[1][k>>8&0xff]++
		count[2][k>>16&0xff]++
		count[3][k>>24&0xff]++
		count[4][k>>32&0xff]++
		count[5][k>>40&0xff]++
		count[6][k>>48&0xff]++
		count[7][k>>56]++
	}
	tmp := make([]nodeRef, len(refs))
	src, dst := refs, tmp
	for d := range 8 {
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

// idKey returns the first eight bytes of s, big-endian, zero-padded.
func idKey(s string) uint64 {
	if len(s) >= 8 {
		return uint64(s[0])<<56 | uint64(s[1])<<48 | uint64(s[2])<<40 | uint64(s[3])<<32 |
			uint64(s[4])<<24 | uint64(s[5])<<16 | uint64(s[6])<<8 | uint64(s[7])
	}
	var k uint64
	for i := range 8 {
		k <<= 8
		if i < len(s) {
			k |= uint64(s[i])
		}
	}
	return k
}

// contains reports whether id is one of the nodes' ids.
func (o idOrder) contains(nodes []Node, id string) bool {
	if len(o.refs) == 0 || !strings.HasPrefix(id, nodes[0].ID[:o.skip]) {
		return false
	}
	key := idKey(id[o.skip:])
	_, found := slices.BinarySearchFunc(o.refs, id, func(r nodeRef, id string) int {
		switch {
		case r.key < key:
			return -1
		case r.key > key:
			return 1
		}
		return strings.Compare(nodes[r.i].ID, id)
	})
	return found
}

// rankKey orders eligible candidates: tier, then score descending, then
// node id (its rank among the ids).
type rankKey struct {
	score float64
	tier  Tier
	rank  int32
	i     int32
}

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

// raw holds what phase B needs of an eligible node beyond its Candidate.
type raw struct {
	cand          int32   // index of the node and its candidate
	accelAssigned bool    // an accel.* capability was assigned
	accelCap      float64 // their summed mem_bytes; 0 when unknown
	hasAccel      bool    // the node has any accel.* capability
	perf          float64
	hasPerf       bool
	load          float64
	loadKnown     bool
	locality      float64
}

// evaluator runs phase A node by node, reusing its scratch space.
type evaluator struct {
	p     *plan
	caps  []Capability // the node's, while it is evaluated
	scan  *nodeScan
	joint *joint
	rej   []Rejection

	// The assignment of the route chosen so far on this node, flattened:
	// route requirement k has bestIDs[bestAt[k]:bestAt[k+1]].
	bestIDs []int32
	bestAt  []int32

	rejections arena[Rejection]
	ids        arena[string]
	lists      arena[[]string]
}

func newEvaluator(p *plan, nodes int) *evaluator {
	hint := min(max(nodes, 16), 4096)
	return &evaluator{
		p: p, scan: newNodeScan(len(p.reqs)), joint: newJoint(len(p.reqs)),
		rejections: arena[Rejection]{chunk: hint * 2},
		ids:        arena[string]{chunk: hint * 4},
		lists:      arena[[]string]{chunk: hint * 4},
	}
}

// evaluate fills c for node n: its rejections, or its route; it returns
// the phase B inputs of an eligible node.
func (e *evaluator) evaluate(n *Node, c *Candidate) (raw, bool) {
	p := e.p
	req := p.req
	e.rej = e.rej[:0]
	c.Node = n.ID

	if p.revokedNodes != nil {
		if _, ok := p.revokedNodes[n.ID]; ok {
			e.reject(CodeNodeRevoked, "node is revoked")
		}
	}
	switch n.Liveness {
	case Alive:
	case Suspect:
		e.reject(CodeLiveness, "node is suspect")
	case Dead:
		e.reject(CodeLiveness, "node is dead")
	default:
		e.reject(CodeLiveness, "node liveness is unknown")
	}
	if n.FactsExpired {
		e.reject(CodeFactsExpired, "facts expired")
	}
	if n.Trust < req.MinTrust {
		t := n.Trust
		if t > TrustPinned {
			t = TrustNone
		}
		e.reject(CodeTrust, p.trustDetail[t])
	}
	if p.workloadRevoked != "" {
		e.reject(CodeWorkloadRevoked, p.workloadRevoked)
	}
	if d := coResidency(req, n.Instances); d != "" {
		e.reject(CodeCoResidency, d)
	}

	s := e.scan
	e.caps = n.Capabilities
	s.scan(p, n.Capabilities)
	variant, tier := e.route(n)

	switch n.Gate {
	case VerdictAllow:
	case VerdictDeny:
		if n.GateReason == "" {
			e.reject(CodeGate, "workload.place denied")
		} else {
			e.reject(CodeGate, "workload.place denied: "+n.GateReason)
		}
	default:
		e.reject(CodeGate, "no gate decision for this node")
	}
	if t := p.perf; t != nil && t.HasBudget && s.hasPerf {
		if (t.Better == BetterLower && s.perf > t.Budget) || (t.Better == BetterHigher && s.perf < t.Budget) {
			e.reject(CodePerfBudget, p.perfHead+formatFloat(s.perf)+p.perfTail)
		}
	}

	if len(e.rej) > 0 {
		c.Rejections = e.rejections.take(len(e.rej))
		copy(c.Rejections, e.rej)
		return raw{}, false
	}

	v := &p.variants[variant]
	c.Variant, c.Tier = v.name, tier
	if tier == TierEmulated {
		c.Flags |= FlagEmulated
	}
	r := raw{hasAccel: s.hasAccel, perf: s.perf, hasPerf: s.hasPerf}
	if len(n.Capabilities) > 0 {
		r.load, r.loadKnown = float64(s.busy)/float64(len(n.Capabilities)), true
	}
	// The assignment, by id, per route requirement; and the capacity of
	// the distinct accelerators in it.
	nr := len(e.bestAt) - 1
	c.Assigned = e.lists.take(nr)
	var capacity float64
	unknown := false
	for k := range nr {
		idx := e.bestIDs[e.bestAt[k]:e.bestAt[k+1]]
		ids := e.ids.take(len(idx))
		for m, ci := range idx {
			cp := &n.Capabilities[ci]
			ids[m] = cp.ID
			if !grammar.SelectorMatches(accelFamily, cp.ID) || slices.Contains(e.bestIDs[:e.bestAt[k]+int32(m)], ci) {
				continue
			}
			r.accelAssigned = true
			if mb := attr(cp, AttrMemBytes); mb != nil {
				if f, ok := mb.number(); ok && f > 0 && !math.IsInf(f, 0) {
					capacity += f
					continue
				}
			}
			unknown = true
		}
		c.Assigned[k] = ids
	}
	if !unknown {
		r.accelCap = capacity
	}
	for i := p.prefStart; i < len(p.reqs); i++ {
		if len(s.cands[i]) >= p.reqs[i].count {
			r.locality += req.Preferences[i-p.prefStart].Weight
		}
	}
	return r, true
}

func (e *evaluator) reject(code Code, detail string) {
	e.rej = append(e.rej, Rejection{Code: code, Detail: detail})
}

// route is reference 3.6.2 route selection: the first native variant
// that fits, else the first emulated one when allowed. It records the
// chosen assignment in bestIDs/bestAt. Only when no route is chosen does
// it go through the variants again to record why each fails: a node that
// fits pays for no text.
func (e *evaluator) route(n *Node) (variant int, tier Tier) {
	p, s := e.p, e.scan
	commonOK := true
	for ri := 0; ri < p.nCommon && commonOK; ri++ {
		commonOK = e.requirementPasses(ri, false)
	}
	native, emulated, emulatedFit := -1, -1, int32(0)
	mem := nodeMemory(n)
	for vi := 0; vi < len(p.variants) && commonOK; vi++ {
		v := &p.variants[vi]
		s.ensure(p, n.Capabilities, vi)
		ok := true
		for ri := v.start; ri < v.end && ok; ri++ {
			ok = e.requirementPasses(ri, false)
		}
		if !ok || !e.memoryFits(&mem, v, false) || !e.jointly(vi, n.Capabilities, false) {
			continue
		}
		if !v.emulated {
			native = vi
			e.keepAssignment(vi)
			break
		}
		emulatedFit |= 1 << vi
		if emulated < 0 {
			emulated = vi
			e.keepAssignment(vi)
		}
	}
	switch {
	case native >= 0 && s.isDev:
		return native, TierDevFallback
	case native >= 0:
		return native, TierNative
	case emulated >= 0 && p.req.AllowEmulated:
		return emulated, TierEmulated
	}

	// No route: record every failure.
	for ri := range p.nCommon {
		e.requirementPasses(ri, true)
	}
	for vi := range p.variants {
		v := &p.variants[vi]
		s.ensure(p, n.Capabilities, vi)
		ok := commonOK
		for ri := v.start; ri < v.end; ri++ {
			ok = e.requirementPasses(ri, true) && ok
		}
		if ok {
			e.jointly(vi, n.Capabilities, true)
		}
		e.memoryFits(&mem, v, true)
	}
	if emulated >= 0 {
		e.reject(CodeEmulationNotAllowed, p.detail(msgKey{kind: msgEmulation, a: emulatedFit}))
	}
	return -1, 0
}

// requirementPasses reports whether requirement ri passes on its own,
// recording its failure when record is set.
func (e *evaluator) requirementPasses(ri int, record bool) bool {
	r := &e.p.reqs[ri]
	k, state, fails := e.scan.stats[ri].failure(ri, len(e.scan.cands[ri]), r.count, e.caps)
	if !fails {
		return true
	}
	if !record {
		return false
	}
	code := CodeRequirements
	if k.kind == msgProvenance {
		code = CodeProvenance
	}
	if state != "" {
		e.reject(code, r.prefix+"`"+r.sel+"`: unavailable ("+state+")")
	} else {
		e.reject(code, e.p.detail(k))
	}
	return false
}

// jointly matches the common requirements and variant vi's together,
// recording a contention failure when record is set.
func (e *evaluator) jointly(vi int, caps []Capability, record bool) bool {
	p, j := e.p, e.joint
	v := &p.variants[vi]
	j.reqs = j.reqs[:0]
	for ri := range p.nCommon {
		j.reqs = append(j.reqs, int32(ri))
	}
	for ri := v.start; ri < v.end; ri++ {
		j.reqs = append(j.reqs, int32(ri))
	}
	if j.solve(p, e.scan, caps) {
		return true
	}
	if !record {
		return false
	}
	any := false
	for _, ri := range j.reqs {
		if j.competing(p, ri) {
			e.reject(CodeRequirements, p.detail(msgKey{kind: msgContended, req: ri, a: int32(vi)}))
			any = true
		}
	}
	if !any {
		for _, ri := range j.reqs {
			e.reject(CodeRequirements, p.detail(msgKey{kind: msgContended, req: ri, a: int32(vi)}))
		}
	}
	return false
}

// keepAssignment saves the joint assignment of variant vi's route.
func (e *evaluator) keepAssignment(vi int) {
	p, j := e.p, e.joint
	v := &p.variants[vi]
	e.bestIDs = e.bestIDs[:0]
	e.bestAt = append(e.bestAt[:0], 0)
	add := func(ri int) {
		e.bestIDs = append(e.bestIDs, j.assign[ri]...)
		e.bestAt = append(e.bestAt, int32(len(e.bestIDs)))
	}
	for ri := range p.nCommon {
		add(ri)
	}
	for ri := v.start; ri < v.end; ri++ {
		add(ri)
	}
}

// memory is a node's pools and what pending placements already hold.
type memory struct {
	unified             bool
	host, vram          uint64
	pendHost, pendAccel uint64
}

func nodeMemory(n *Node) memory {
	m := memory{unified: n.Memory.Unified, host: n.Memory.HostFree}
	if !m.unified {
		for _, f := range n.Memory.VRAMFree {
			m.vram = satAdd(m.vram, f)
		}
	}
	for _, r := range n.Pending {
		m.pendHost = satAdd(m.pendHost, r.HostBytes)
		m.pendAccel = satAdd(m.pendAccel, r.AccelBytes)
	}
	return m
}

// memoryFits checks variant v's demand, with pending reservations, against
// the node's pools, recording each pool that is short when record is set.
func (e *evaluator) memoryFits(m *memory, v *variantPlan, record bool) bool {
	ok := true
	check := func(pool string, host, accel, pending, free uint64) {
		if host == 0 && accel == 0 {
			return
		}
		if fits(free, host, accel, pending) {
			return
		}
		ok = false
		if !record {
			return
		}
		need := satAdd(satAdd(host, accel), pending)
		var b strings.Builder
		b.Grow(96)
		b.WriteString(v.prefix)
		b.WriteString(pool)
		b.WriteString(" pool: need ")
		b.WriteString(strconv.FormatUint(need, 10))
		b.WriteString(" bytes")
		if pending > 0 {
			b.WriteString(" (")
			b.WriteString(strconv.FormatUint(pending, 10))
			b.WriteString(" pending)")
		}
		b.WriteString(", free ")
		b.WriteString(strconv.FormatUint(free, 10))
		b.WriteString(" bytes")
		e.reject(CodeMemory, b.String())
	}
	if m.unified {
		check("unified", v.res.HostBytes, v.res.AccelBytes, satAdd(m.pendHost, m.pendAccel), m.host)
	} else {
		check("system", v.res.HostBytes, 0, m.pendHost, m.host)
		check("vram", 0, v.res.AccelBytes, m.pendAccel, m.vram)
	}
	return ok
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

// coResidency returns why an instance on the node conflicts with the
// request, or "": the first instance (in the node's order) that carries a
// label the request excludes, or excludes one of its labels.
func coResidency(req *Request, instances []Instance) string {
	if len(req.Excludes) == 0 && len(req.Labels) == 0 {
		return ""
	}
	for _, in := range instances {
		if in.Kind == req.Kind && in.Name == req.Name {
			continue // the workload's own instance is not a neighbour
		}
		for _, l := range in.Labels {
			if slices.Contains(req.Excludes, l) {
				return "instance " + in.Kind + "/" + in.Name + " has label " + l + ", which this workload excludes"
			}
		}
		for _, x := range in.Excludes {
			if slices.Contains(req.Labels, x) {
				return "instance " + in.Kind + "/" + in.Name + " excludes label " + x + " of this workload"
			}
		}
	}
	return ""
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// arena hands out slices carved from shared chunks, so that a decision
// over many nodes makes a few large allocations rather than one per node.
// Carved slices have their capacity clipped: appending to one never
// writes into another.
type arena[T any] struct {
	buf   []T
	chunk int
}

func (a *arena[T]) take(n int) []T {
	if n == 0 {
		return nil
	}
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]T, 0, max(n, a.chunk))
	}
	l := len(a.buf)
	a.buf = a.buf[:l+n]
	return a.buf[l : l+n : l+n]
}
