package engine

import (
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

	// byFirst lists, for each first byte of a capability id, the
	// requirements whose selector starts with it: a capability is tested
	// only against selectors that can select it. firstAt[b] ..
	// firstAt[b+1] indexes firstReqs.
	firstAt   [257]int32
	firstReqs []int32

	revokedNodes    map[string]struct{}
	workloadRevoked string // the detail when a revocable ref is revoked
	trustDetail     [TrustPinned + 1]string

	perf    *PerfTarget
	perfMul float64 // the perf weight, with the interactive multiplier

	// msgs memoises rejection details that depend only on the request
	// (a requirement's selector, variant, predicate), so that rejecting
	// many nodes for the same reason allocates the text once.
	msgs map[msgKey]string
}

type reqPlan struct {
	sel       string
	preds     []Predicate
	count     int
	exclusive bool
	minRank   int
	// prefix is "variant <name>: " for a variant's requirement, "" for a
	// common one.
	prefix string
}

type variantPlan struct {
	name       string
	start, end int // its requirements in plan.reqs
	emulated   bool
	res        Resources
	prefix     string
}

func compile(req *Request, w *Weights, cl *Cluster) *plan {
	p := &plan{req: req, w: w, perf: req.Perf, msgs: make(map[msgKey]string)}
	floor, _ := grammar.ProvenanceRank(req.MinProvenance)
	add := func(q *Requirement, prefix string) {
		rank, _ := grammar.ProvenanceRank(q.MinProvenance)
		count := q.Count
		if count == 0 {
			count = 1
		}
		p.reqs = append(p.reqs, reqPlan{
			sel: q.Selector, preds: q.Predicates, count: count, exclusive: q.Exclusive,
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

	// Bucket requirements by the first byte of their selector (validated
	// non-empty).
	var counts [256]int32
	for _, r := range p.reqs {
		counts[r.sel[0]]++
	}
	for b := range 256 {
		p.firstAt[b+1] = p.firstAt[b] + counts[b]
	}
	p.firstReqs = make([]int32, len(p.reqs))
	next := p.firstAt
	for i, r := range p.reqs {
		b := r.sel[0]
		p.firstReqs[next[b]] = int32(i)
		next[b]++
	}

	if len(cl.RevokedNodes) > 0 {
		p.revokedNodes = make(map[string]struct{}, len(cl.RevokedNodes))
		for _, id := range cl.RevokedNodes {
			p.revokedNodes[id] = struct{}{}
		}
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
	for t := range p.trustDetail {
		p.trustDetail[t] = "tier " + Trust(t).String() + " below required " + req.MinTrust.String()
	}
	p.perfMul = w.Perf
	if req.Interactive {
		p.perfMul *= w.InteractivePerfMultiplier
	}
	return p
}

// candidatesFor returns the requirements whose selector starts with b.
func (p *plan) candidatesFor(b byte) []int32 {
	return p.firstReqs[p.firstAt[b]:p.firstAt[int(b)+1]]
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

// detail returns the memoised text of a requirement failure.
func (p *plan) detail(k msgKey) string {
	if s, ok := p.msgs[k]; ok {
		return s
	}
	var s string
	if k.kind == msgEmulation {
		var names []string
		for vi, v := range p.variants {
			if k.a&(1<<vi) != 0 {
				names = append(names, v.name)
			}
		}
		s = "only emulated route(s) fit (" + strings.Join(names, ", ") + "); emulation needs explicit allow_emulated"
		p.msgs[k] = s
		return s
	}
	r := &p.reqs[k.req]
	head := r.prefix + "`" + r.sel + "`: "
	switch k.kind {
	case msgNotAdvertised:
		s = head + "not advertised"
	case msgProvenance:
		s = head + "provenance " + provenanceNames[k.a] + " below " + provenanceNames[r.minRank]
	case msgPredicate:
		pr := r.preds[k.a]
		s = head + "predicate `" + pr.Attr + " " + pr.Op + " " + pr.Value.String() + "` failed"
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
	p.msgs[k] = s
	return s
}
