package engine

// Decision is the engine's answer: where the workload goes (Chosen, nil
// when no node is eligible) and why, with every node given to Place in
// Candidates. Explain renders it as text.
type Decision struct {
	// Kind, Name, AllowEmulated and Pin repeat the request, so that a
	// Decision explains itself alone.
	Kind          string
	Name          string
	AllowEmulated bool
	Pin           string
	// Chosen is the placement; nil means unplaceable.
	Chosen *Placement
	// Candidates holds one entry per node: the eligible ones first, ranked
	// by tier (native, emulated, dev_fallback), then total score
	// descending, then node id; then the rejected ones by node id. A pin or
	// affinity choice does not reorder it.
	Candidates []Candidate
}

// Placement is the chosen node and route.
type Placement struct {
	Node      string
	Variant   string
	Execution Execution
	Tier      Tier
	// Accelerator is the first accel.* capability assigned to the
	// workload, in requirement order; empty when none was.
	Accelerator string
	Score       Score
	// Flags are the candidate's, with FlagPinned or FlagAffinity when the
	// pin or prefer/avoid made this choice.
	Flags Flags
}

// Candidate is one node's outcome: either Rejections (every constraint it
// fails, in evaluation order) or the route it would take and its score.
type Candidate struct {
	Node string
	// Rejections is empty for an eligible node.
	Rejections []Rejection
	// Variant, Tier, Flags, Score and Assigned are set for eligible nodes
	// only.
	Variant string
	Tier    Tier
	Flags   Flags
	// The assignment (see assignBlock): where it starts in its block,
	// and the block, nil for a rejected node. With Flags beside Tier, a
	// Candidate is 128 bytes.
	assignAt int32
	Score    Score
	assigned *assignBlock
}

// assignBlock holds the assignments of some eligible candidates, one
// after the other in idx, by capability index in the node's Profile: at
// its start, an assignment has the index in prs of its Profile, then the
// offsets, from its start, of each route requirement's list and of the
// end of the last; requirement k of a route of r has the indices from
// offset k+1 to offset k+2 (the first offset is r+2).
type assignBlock struct {
	idx []int32
	prs []*Profile
}

// assignment returns the Profile and the assignment of an eligible
// candidate, or nil, nil.
func (c *Candidate) assignment() (*Profile, []int32) {
	b := c.assigned
	if b == nil {
		return nil, nil
	}
	a := b.idx[c.assignAt:]
	return b.prs[a[0]], a
}

// Assigned lists, per requirement of the route (the common ones, then
// the chosen variant's, in declaration order), the ids of the
// capabilities it was given; nil for a rejected node. Place records
// indices; the lists are made on each call.
func (c Candidate) Assigned() [][]string {
	pr, a := c.assignment()
	if pr == nil || a[1] == 2 {
		return nil
	}
	r := int(a[1]) - 2 // the offsets end where the first list starts
	out := make([][]string, r)
	for k := range r {
		idx := a[a[k+1]:a[k+2]]
		if len(idx) == 0 {
			continue
		}
		ids := make([]string, len(idx))
		for m, ci := range idx {
			ids[m] = pr.id(ci)
		}
		out[k] = ids
	}
	return out
}

// Eligible reports whether the node passed every constraint.
func (c Candidate) Eligible() bool { return len(c.Rejections) == 0 }

// Score is the phase B breakdown of an eligible node; Total is the sum of
// the six components.
type Score struct {
	Execution  float64
	Locality   float64
	AccelFit   float64
	Perf       float64
	Load       float64
	Stickiness float64
	Total      float64
}

// Rejection is one failed constraint: a stable Code that callers and the
// audit chain may branch on, and a Detail for people.
type Rejection struct {
	Code Code
	why  why
}

// Detail says what failed, for people ("variant cuda: vram pool: need
// 9663676416 bytes, free 0 bytes"). Place records only the figures and
// names; the text is formatted here, on each call.
func (r Rejection) Detail() string { return r.why.text() }

// Code names a hard constraint. Codes are stable: they cross the mesh and
// enter the audit chain, and are never renamed.
type Code string

// The hard constraints, in the order they are evaluated and recorded.
const (
	// CodeNodeRevoked: the node id is in Cluster.RevokedNodes.
	CodeNodeRevoked Code = "node_revoked"
	// CodeLiveness: the node is not Alive.
	CodeLiveness Code = "liveness"
	// CodeFactsExpired: the node's facts are past their TTL.
	CodeFactsExpired Code = "facts_expired"
	// CodeTrust: the node's tier is below Request.MinTrust.
	CodeTrust Code = "trust"
	// CodeWorkloadRevoked: one of Request.RevocableRefs is revoked (every
	// node fails it).
	CodeWorkloadRevoked Code = "workload_revoked"
	// CodeCoResidency: an instance on the node carries a label the request
	// excludes, or excludes one of the request's labels.
	CodeCoResidency Code = "co_residency"
	// CodeRequirements: a requirement matches too few usable capabilities,
	// alone or jointly with the route's other requirements.
	CodeRequirements Code = "requirements"
	// CodeProvenance: a requirement's capabilities are all below its
	// minimum provenance.
	CodeProvenance Code = "provenance"
	// CodeMemory: a variant's memory demand, with the node's pending
	// reservations, does not fit a pool.
	CodeMemory Code = "memory"
	// CodeEmulationNotAllowed: only emulated routes fit and the request
	// does not allow emulation.
	CodeEmulationNotAllowed Code = "emulation_not_allowed"
	// CodeGate: governance denied the placement here, or gave no verdict.
	CodeGate Code = "gate"
	// CodePerfBudget: the node's measured performance misses the budget.
	CodePerfBudget Code = "perf_budget"
)

// Tier is the strict placement order of eligible candidates: every
// native candidate ranks above every emulated one, which rank above every
// dev_fallback one, whatever their scores.
type Tier uint8

// Tiers, best first; the value is the rank.
const (
	TierNative Tier = iota
	TierEmulated
	TierDevFallback
)

// String returns "native", "emulated" or "dev_fallback".
func (t Tier) String() string {
	switch t {
	case TierNative:
		return "native"
	case TierEmulated:
		return "emulated"
	case TierDevFallback:
		return "dev_fallback"
	default:
		return "invalid"
	}
}

// Flags mark notable facts about a candidate or the placement.
type Flags uint8

// Flags, in alphabetical order of their names.
const (
	// FlagAffinity: prefer or avoid chose other than the best of the tier.
	FlagAffinity Flags = 1 << iota
	// FlagEmulated: the route runs under emulation.
	FlagEmulated
	// FlagLoadUnknown: the node has no capabilities, so no load; scored 0.
	FlagLoadUnknown
	// FlagPinned: chosen because the request pinned it.
	FlagPinned
	// FlagUnmeasured: the request has a perf target and the node no
	// measurement of it; scored 0.
	FlagUnmeasured
)

var flagNames = [...]string{"affinity", "emulated", "load_unknown", "pinned", "unmeasured"}

// Names returns the names of the set flags, sorted.
func (f Flags) Names() []string {
	var names []string
	for i, n := range flagNames {
		if f&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return names
}
