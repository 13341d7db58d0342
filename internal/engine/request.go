package engine

import "github.com/nodeld/nodeld/internal/grammar"

// Request describes one workload to place: what every route of it needs
// (Requirements), its alternative routes (Variants), the policy that bounds
// where it may go, and the operator's pin and affinity. The controller
// builds it from a verified package and a placement order.
type Request struct {
	// Kind is the workload kind ("inference", "service"): a grammar
	// Name. Shown in the explanation; the engine is kind-agnostic.
	Kind string
	// Name names the workload: 1 to MaxTextLen bytes of printable ASCII.
	// Together with Kind it identifies the workload's own instances, which
	// are not its neighbours for co-residency.
	Name string

	// Requirements are the common requirements: every variant needs them,
	// matched jointly with the variant's own.
	Requirements []Requirement
	// Variants are the routes, in the package's order of preference: the
	// first native variant that fits a node is chosen there, else the
	// first emulated one when AllowEmulated. At least one; memory demand
	// is per variant.
	Variants []Variant

	// Labels are this workload's labels, which neighbours may exclude.
	Labels []string
	// Excludes are labels this workload refuses to share a node with.
	Excludes []string
	// RevocableRefs are what a revocation may name for this workload (the
	// package id, its signer keys, its artifact hashes); one of them in
	// Cluster.RevokedRefs rejects every node.
	RevocableRefs []string

	// MinTrust is the trust floor: a node of a lower tier is rejected.
	// Required (TrustNone is invalid here).
	MinTrust Trust
	// MinProvenance, when set, raises every requirement's minimum
	// provenance to it (a grammar provenance: claimed, probed, measured).
	MinProvenance string
	// AllowEmulated lets emulated variants be chosen (operator opt-in;
	// never automatic).
	AllowEmulated bool

	// Preferences add their weight to the locality score of every node
	// where their requirement matches. Soft: they never reject.
	Preferences []Preference
	// Perf, when set, scores nodes by a measured performance figure and
	// rejects those whose measurement misses its budget.
	Perf *PerfTarget
	// Interactive multiplies the perf weight by
	// Weights.InteractivePerfMultiplier (latency class interactive).
	Interactive bool

	// CurrentNode, when set, is where the workload runs now: it earns the
	// stickiness score there.
	CurrentNode string
	// Sticky gives CurrentNode Weights.Sticky rather than
	// Weights.Stickiness.
	Sticky bool

	// Pin, when set, must be chosen: it overrides scores and tiers, never a
	// constraint. An unknown or ineligible pin is an error.
	Pin string
	// Prefer and Avoid steer the choice among the eligible nodes of the
	// best tier only: the first preferred node in rank order wins, else
	// the first not avoided, else the best. They never admit a rejected
	// node and never cross a tier; avoiding every node still places.
	Prefer []string
	Avoid  []string
}

// Variant is one route of a workload: its own requirements, the memory an
// instance takes, and how it executes.
type Variant struct {
	// Name is a grammar Name, unique in the request.
	Name string
	// Execution is native unless the variant runs under emulation.
	Execution Execution
	// Requirements are matched jointly with Request.Requirements.
	Requirements []Requirement
	// Resources are the memory an instance of this variant takes.
	Resources Resources
}

// Resources are memory demand in bytes: host memory and accelerator
// memory (VRAM). On a unified-memory node both come from the one pool.
type Resources struct {
	HostBytes  uint64
	AccelBytes uint64
}

// Requirement selects capabilities of a node and says how many it needs.
type Requirement struct {
	// Selector is a capability id that selects itself and the ids under
	// it on a dot boundary (grammar.SelectorMatches): "accel.gpu" selects
	// "accel.gpu.nvidia.0" but not "accel.gpux".
	Selector string
	// Predicates must all hold on one capability for it to count.
	Predicates []Predicate
	// Count is how many matching, usable capabilities are needed; 0 means
	// 1.
	Count int
	// Exclusive requirements hold their capabilities alone: nothing else
	// of the workload uses them, and a busy one is not usable.
	Exclusive bool
	// MinProvenance is the weakest evidence accepted (a grammar
	// provenance); empty accepts any.
	MinProvenance string
}

// Predicate is a test on one attribute of a capability. Op is a grammar
// predicate operator: eq (loose numeric equality between int and float),
// gte and lte (numeric), in (Value is a list holding the attribute) and
// has (the attribute is a list holding Value). A missing attribute fails.
type Predicate struct {
	Attr  string
	Op    string
	Value grammar.Value
}

// Preference is a soft requirement: a node where Requirement matches (on
// its own, as a single requirement) earns Weight in locality.
type Preference struct {
	Requirement Requirement
	Weight      float64
}

// PerfTarget scores nodes by a measured figure: the "value" attribute
// (AttrValue) of capabilities with id ID, provenance measured, whose
// attribute Param equals ParamValue (any, when Param is empty).
type PerfTarget struct {
	ID         string
	Param      string
	ParamValue grammar.Value
	// Better says which direction is better.
	Better Better
	// Budget, when HasBudget, is the worst acceptable value: a node whose
	// measurement misses it is rejected (perf_budget). A node with no
	// measurement is never rejected by the budget.
	Budget    float64
	HasBudget bool
}

// Better is the direction in which a perf figure improves.
type Better uint8

// Directions of a perf figure. The zero value is invalid.
const (
	BetterLower  Better = iota + 1 // latencies, seconds per token
	BetterHigher                   // throughputs, tokens per second
)

// String returns "lower" or "higher".
func (b Better) String() string {
	switch b {
	case BetterLower:
		return "lower"
	case BetterHigher:
		return "higher"
	default:
		return "invalid"
	}
}

// Execution says how a variant runs on a node.
type Execution uint8

// Executions. Native is the zero value.
const (
	Native Execution = iota
	Emulated
)

// String returns "native" or "emulated".
func (e Execution) String() string {
	switch e {
	case Native:
		return "native"
	case Emulated:
		return "emulated"
	default:
		return "invalid"
	}
}

// Trust is the tier an operator assigned to a node, never self-asserted:
// discovered < paired < pinned.
type Trust uint8

// Trust tiers in order. TrustNone (the zero value) ranks below every tier:
// a node without one fails any trust floor.
const (
	TrustNone Trust = iota
	TrustDiscovered
	TrustPaired
	TrustPinned
)

// ParseTrust maps a trust tier's name (grammar.TrustTiers) to its Trust;
// ok is false for anything else.
func ParseTrust(name string) (t Trust, ok bool) {
	r, ok := grammar.TrustTierRank(name)
	return Trust(r), ok
}

// String returns the tier's name (grammar.TrustTiers), "none" or
// "invalid".
func (t Trust) String() string {
	switch t {
	case TrustNone:
		return "none"
	case TrustDiscovered, TrustPaired, TrustPinned:
		return grammar.TrustTiers()[t-1]
	default:
		return "invalid"
	}
}
