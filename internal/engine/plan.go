package engine

import (
	"slices"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// plan is a Request compiled once per Place call, so that the per-node
// work does no parsing, no lookups by name and few allocations.
type plan struct {
	req *Request
	w   *Weights

	// reqs are every requirement the engine matches: the common ones
	// [0, nCommon), then each variant's (variants[v].start..end), then the
	// preferences' [prefStart, len).
	reqs      []reqPlan
	nCommon   int
	variants  []variantPlan
	prefStart int

	// table holds the selectors a capability is tested against, bucketed
	// by the first byte of its id: the pseudo-selectors (dev class,
	// accelerator family, perf target), the common requirements, the
	// preferences and every variant's requirements. A node's capabilities
	// are scanned once; the hits of the selectors of variants after the
	// first are only noted, and matched if route selection gets past the
	// first variant: a node that fits it never needs the others.
	table bucketTable

	// routes lists, per variant, its route's requirements: the common
	// ones, then the variant's.
	routes [][]int32

	workloadRevoked string                  // the detail when a revocable ref is revoked
	coResidency     bool                    // the request has labels or excludes
	labelMask       uint64                  // textBit of each label
	excludeMask     uint64                  // textBit of each exclude
	trustDetail     [TrustPinned + 1]string // made on first use

	perf     *PerfTarget
	perfMul  float64 // the perf weight, with the interactive multiplier
	perfHead string  // "measured <id> ", of a perf_budget rejection
	perfTail string  // " misses budget <b>"

	// msgs memoises rejection details that depend only on the request
	// (a requirement's selector, variant, predicate), so that rejecting
	// many nodes for the same reason allocates the text once: per
	// requirement, one slot per detail it can have (msgSlot), made on
	// first use; and the emulation details, by set of variants.
	msgs         [][]string
	emulatedMsgs []emulatedMsg
}

type reqPlan struct {
	sel       string
	preds     []Predicate // as given, for rejection texts
	cpreds    []cpred     // compiled, for matching
	count     int
	exclusive bool
	minRank   int
	// prefix is "variant <name>: " for a variant's requirement, "" for a
	// common one.
	prefix string
}

// cpred is a compiled predicate.
type cpred struct {
	attr string
	op   uint8
	v    *grammar.Value
	num  float64 // the operand as a number, for gte and lte
}

type variantPlan struct {
	name       string
	start, end int // its requirements in plan.reqs
	emulated   bool
	res        Resources
	prefix     string
}

func compile(req *Request, w *Weights, cl *Cluster) *plan {
	p := &plan{req: req, w: w, perf: req.Perf}
	floor, _ := grammar.ProvenanceRank(req.MinProvenance)
	add := func(q *Requirement, prefix string) {
		rank, _ := grammar.ProvenanceRank(q.MinProvenance)
		count := q.Count
		if count == 0 {
			count = 1
		}
		cp := make([]cpred, len(q.Predicates))
		for i := range q.Predicates {
			pr := &q.Predicates[i]
			cp[i] = cpred{attr: pr.Attr, op: opCode(pr.Op), v: &pr.Value}
			cp[i].num, _ = pr.Value.Number()
		}
		p.reqs = append(p.reqs, reqPlan{
			sel: q.Selector, preds: q.Predicates, cpreds: cp, count: count, exclusive: q.Exclusive,
			minRank: max(rank, floor), prefix: prefix,
		})
	}
	n := len(req.Requirements) + len(req.Preferences)
	for _, v := range req.Variants {
		n += len(v.Requirements)
	}
	p.reqs = make([]reqPlan, 0, n)
	for i := range req.Requirements {
		add(&req.Requirements[i], "")
	}
	p.nCommon = len(p.reqs)
	p.variants = make([]variantPlan, len(req.Variants))
	for vi := range req.Variants {
		v := &req.Variants[vi]
		prefix := "variant " + v.Name + ": "
		start := len(p.reqs)
		for i := range v.Requirements {
			add(&v.Requirements[i], prefix)
		}
		p.variants[vi] = variantPlan{name: v.Name, start: start, end: len(p.reqs),
			emulated: v.Execution == Emulated, res: v.Resources, prefix: prefix}
	}
	p.prefStart = len(p.reqs)
	for i := range req.Preferences {
		add(&req.Preferences[i].Requirement, "")
	}
	p.msgs = make([][]string, len(p.reqs))

	p.buildTable(&p.table)
	p.routes = make([][]int32, len(p.variants))
	all := make([]int32, 0, len(p.variants)*p.nCommon+p.prefStart-p.nCommon)
	for vi, v := range p.variants {
		start := len(all)
		for ri := range p.nCommon {
			all = append(all, int32(ri))
		}
		for ri := v.start; ri < v.end; ri++ {
			all = append(all, int32(ri))
		}
		p.routes[vi] = all[start:len(all):len(all)]
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
				p.workloadRevoked = "workload ref " + r + " is revoked"
				break
			}
		}
	}
	if t := req.Perf; t != nil {
		p.perfHead = "measured " + t.ID + " "
		p.perfTail = " misses budget " + formatFloat(t.Budget)
	}
	p.perfMul = w.Perf
	if req.Interactive {
		p.perfMul *= w.InteractivePerfMultiplier
	}
	return p
}

// trustText is the detail of a trust rejection of a node of tier t
// (TrustNone to TrustPinned), memoised.
func (p *plan) trustText(t Trust) string {
	if p.trustDetail[t] == "" {
		p.trustDetail[t] = "tier " + t.String() + " below required " + p.req.MinTrust.String()
	}
	return p.trustDetail[t]
}

// perfDetail is the text of a perf_budget rejection for a node that
// measured f, made with one allocation.
func (p *plan) perfDetail(f float64) string {
	var buf [256]byte
	b := append(buf[:0], p.perfHead...)
	b = strconv.AppendFloat(b, f, 'f', -1, 64)
	b = append(b, p.perfTail...)
	return string(b)
}

// selector is one entry of a bucket: a requirement's selector, or a
// pseudo-selector.
type selector struct {
	sel   string
	n     int32 // len(sel)
	req   int32 // index in plan.reqs, or one of the sel* kinds below
	last  byte  // sel[n-1]
	exact bool  // matches the id exactly only (dev class, perf target)
	later bool  // a requirement of a variant after the first: matched on demand
}

// Pseudo-selectors.
const (
	selDev   int32 = -1 - iota // Weights.DevFallbackClass, exactly
	selAccel                   // the accelerator family, as a prefix
	selPerf                    // the perf target's id, exactly
)

// bucketTable lists, for each first byte of a capability id, the
// selectors that may select an id starting with it, shortest first:
// at[b] .. at[b+1] indexes sel.
type bucketTable struct {
	at     [257]int32
	sel    []selector
	widest int // the most selectors in one bucket
}

// buildTable builds the bucket table (see plan.table) in t, which is
// zero.
func (p *plan) buildTable(t *bucketTable) {
	var all []selector
	addReqs := func(from, to int, later bool) {
		for ri := from; ri < to; ri++ {
			all = append(all, selector{sel: p.reqs[ri].sel, req: int32(ri), later: later})
		}
	}
	if p.w.DevFallbackClass != "" {
		all = append(all, selector{sel: p.w.DevFallbackClass, req: selDev, exact: true})
	}
	all = append(all, selector{sel: accelFamily, req: selAccel})
	if p.perf != nil {
		all = append(all, selector{sel: p.perf.ID, req: selPerf, exact: true})
	}
	addReqs(0, p.nCommon, false)
	addReqs(p.prefStart, len(p.reqs), false)
	addReqs(p.variants[0].start, p.variants[0].end, false)
	addReqs(p.variants[0].end, p.prefStart, true)
	for i := range all {
		all[i].n, all[i].last = int32(len(all[i].sel)), all[i].sel[len(all[i].sel)-1]
	}
	// By length within a bucket, so that a scan stops at the first
	// selector longer than the id; then a counting sort by first byte:
	// at[b+1] counts, then accumulates.
	slices.SortStableFunc(all, func(a, b selector) int { return int(a.n - b.n) })
	for _, s := range all {
		t.at[int(s.sel[0])+1]++
	}
	for b := 1; b < len(t.at); b++ {
		t.widest = max(t.widest, int(t.at[b]))
		t.at[b] += t.at[b-1]
	}
	t.sel = make([]selector, len(all))
	for _, s := range all {
		b := s.sel[0]
		t.sel[t.at[b]] = s
		t.at[b]++
	}
	// Each at[b] moved to the end of bucket b, the start of b+1.
	copy(t.at[1:], t.at[:256])
	t.at[0] = 0
}

// Kinds of memoised rejection details.
const (
	msgNotAdvertised uint8 = iota
	msgProvenance          // a: best provenance rank found
	msgPredicate           // a: index of the predicate that fails
	msgUnavailable         // a: index of the state in blockingStates
	msgUsable              // a: usable capabilities found
	msgContended           // a: variant index
	msgEmulation           // a: bit set of fitting emulated variants
)

type msgKey struct {
	kind uint8
	req  int32
	a    int32
}

var provenanceNames = [...]string{"unknown", grammar.ProvenanceClaimed, grammar.ProvenanceProbed, grammar.ProvenanceMeasured}

// blockingStates are the states that make a capability unusable.
var blockingStates = [...]string{grammar.StateBusy, grammar.StateReserved, grammar.StateDegraded}

// emulatedMsg is a memoised emulation_not_allowed detail.
type emulatedMsg struct {
	variants int32 // bit set
	s        string
}

// msgSlot returns where requirement k.req memoises the detail k, and
// how many slots the requirement has: not advertised; provenance by rank
// (0 to 3); predicate by index; unavailable by state; usable by count
// (below the requirement's); contended by variant.
func (p *plan) msgSlot(k msgKey) (slot, slots int) {
	r := &p.reqs[k.req]
	provenance := 1
	predicate := provenance + len(provenanceNames)
	unavailable := predicate + len(r.preds)
	usable := unavailable + len(blockingStates)
	contended := usable + r.count
	slots = contended + len(p.variants)
	switch k.kind {
	case msgProvenance:
		slot = provenance
	case msgPredicate:
		slot = predicate
	case msgUnavailable:
		slot = unavailable
	case msgUsable:
		slot = usable
	case msgContended:
		slot = contended
	}
	if k.kind != msgNotAdvertised {
		slot += int(k.a)
	}
	return slot, slots
}

// detail returns the memoised text of a requirement failure.
func (p *plan) detail(k msgKey) string {
	if k.kind == msgEmulation {
		for _, m := range p.emulatedMsgs {
			if m.variants == k.a {
				return m.s
			}
		}
		var names []string
		for vi, v := range p.variants {
			if k.a&(1<<vi) != 0 {
				names = append(names, v.name)
			}
		}
		s := "only emulated route(s) fit (" + strings.Join(names, ", ") + "); emulation needs explicit allow_emulated"
		p.emulatedMsgs = append(p.emulatedMsgs, emulatedMsg{variants: k.a, s: s})
		return s
	}
	slot, slots := p.msgSlot(k)
	if p.msgs[k.req] == nil {
		p.msgs[k.req] = make([]string, slots)
	}
	if s := p.msgs[k.req][slot]; s != "" {
		return s
	}
	var s string
	r := &p.reqs[k.req]
	head := r.prefix + "`" + r.sel + "`: "
	switch k.kind {
	case msgNotAdvertised:
		s = head + "not advertised"
	case msgProvenance:
		s = head + "provenance " + provenanceNames[k.a] + " below " + provenanceNames[r.minRank]
	case msgPredicate:
		pr := r.preds[k.a]
		s = head + "predicate `" + pr.Attr + " " + pr.Op + " " + valueText(pr.Value) + "` failed"
	case msgUnavailable:
		s = head + "unavailable (" + blockingStates[k.a] + ")"
	case msgUsable:
		s = head + strconv.Itoa(int(k.a)) + " usable, need " + strconv.Itoa(r.count)
	case msgContended:
		s = p.variants[k.a].prefix + "`" + r.sel + "`: contended (need " + strconv.Itoa(r.count)
		if r.exclusive {
			s += " exclusive"
		}
		s += ")"
	}
	p.msgs[k.req][slot] = s
	return s
}
