package pkg

import (
	"math"
	"strconv"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Requirement selects capabilities a node must have for a variant to be
// placed there, in the grammar of the capability records nodes sign
// (reference 3.6.2): the selector names capability ids exactly or as a
// dot-prefix ("accel.gpu" selects "accel.gpu.nvidia.a100"), every
// predicate must hold on the same capability, and Count such capabilities
// must be usable.
type Requirement struct {
	// Select is a grammar.ValidCapabilityID, outside the trust family.
	Select string `json:"select"`
	// Predicates all hold on one selected capability; at most
	// MaxPredicates.
	Predicates []Predicate `json:"predicates,omitempty"`
	// Count is how many distinct capabilities must match, 1 to
	// MaxRequirementCount; 0 (absent) means 1.
	Count int `json:"count,omitempty"`
	// Exclusive asks for capabilities no other requirement uses, and
	// never a busy one.
	Exclusive bool `json:"exclusive,omitempty"`
	// MinProvenance is the weakest evidence accepted: claimed (the
	// default when absent), probed or measured.
	MinProvenance string `json:"min_provenance,omitempty"`
}

// Predicate is one condition on an attribute of a selected capability.
type Predicate struct {
	// Attr is a grammar.ValidAttrName.
	Attr string `json:"attr"`
	// Op is eq, gte, lte, in or has (grammar.OpEq ...).
	Op string `json:"op"`
	// Value is the operand; it must fit Op (grammar.ValidPredicateOperand):
	// a scalar for eq and has, a number for gte and lte, a non-empty list
	// for in.
	Value grammar.Value `json:"value"`
}

// PerfTarget asks the placement engine to prefer the node that measured
// the best value of a performance metric (reference 3.6.3): among a
// node's capabilities with id ID and provenance measured, those whose
// attribute Param equals ParamValue give their "value" attribute
// (grammar.AttrValue). For nodeld's own measurements the id is
// perf.infer.<role>, the param "metric" and the param value "ttfb_ms"
// (lower is better) or "tokens_per_s" (higher is better).
type PerfTarget struct {
	// ID is a grammar.ValidCapabilityRecordID outside the trust family.
	ID string `json:"id"`
	// Param is a grammar.ValidAttrName.
	Param string `json:"param"`
	// ParamValue is a scalar the attribute Param must equal.
	ParamValue grammar.Value `json:"param_value"`
	// Better is grammar.PerfBetterLower or grammar.PerfBetterHigher.
	Better string `json:"better"`
	// Budget, when set, rejects a node whose measured value misses it
	// (above it when lower is better, below it when higher is): finite
	// and not negative.
	Budget *float64 `json:"budget,omitempty"`
}

// EffectiveRequirements returns everything the variant requires of a
// node, in the requirement grammar and with defaults filled in (Count at
// least 1, MinProvenance set): first its requires block read as the
// equivalent requirements, then its declared requirements in order.
//
// requires is read as: arch [a] as select cpu.arch.<a>, and several
// architectures as select cpu.arch with predicate name in [...]; os the
// same under os; gpu as select accel.gpu; each runtime r as select
// grammar.RuntimeCapabilityID(r) ("llama.cpp" is runtime.llamacpp). The
// manifest's own runtime is a common requirement (CommonRequirements).
func (v Variant) EffectiveRequirements() []Requirement {
	var out []Requirement
	if r, ok := oneOf(grammar.CapCPUArch, v.Requires.Arch); ok {
		out = append(out, r)
	}
	if r, ok := oneOf(grammar.CapOS, v.Requires.OS); ok {
		out = append(out, r)
	}
	if v.Requires.GPU {
		out = append(out, Requirement{Select: grammar.CapAccelGPU})
	}
	for _, rt := range v.Requires.Runtimes {
		out = append(out, Requirement{Select: grammar.RuntimeCapabilityID(rt)})
	}
	out = append(out, v.Requirements...)
	for i := range out {
		out[i] = out[i].withDefaults()
	}
	return out
}

// oneOf is the requirement that a node has one of names under prefix:
// prefix.<name> for one name, prefix with predicate name in names for
// several; none for no names.
func oneOf(prefix string, names []string) (Requirement, bool) {
	switch len(names) {
	case 0:
		return Requirement{}, false
	case 1:
		if id := prefix + "." + names[0]; grammar.ValidCapabilityRecordID(id) {
			return Requirement{Select: id}, true
		}
	}
	list := make([]grammar.Value, len(names))
	for i, n := range names {
		list[i] = grammar.StringValue(n)
	}
	return Requirement{Select: prefix, Predicates: []Predicate{{
		Attr: grammar.AttrName, Op: grammar.OpIn, Value: grammar.ListValue(list...),
	}}}, true
}

// CommonRequirements returns what every variant of the package requires
// of a node: the runtime it is run with (runtime.<kind>).
func (m *Manifest) CommonRequirements() []Requirement {
	return []Requirement{Requirement{Select: grammar.RuntimeCapabilityID(m.Runtime.Type)}.withDefaults()}
}

// EffectiveExecution returns the variant's execution: ExecutionNative
// when none is declared.
func (v Variant) EffectiveExecution() string {
	if v.Execution == "" {
		return grammar.ExecutionNative
	}
	return v.Execution
}

// withDefaults returns r with Count at least 1 and MinProvenance set.
func (r Requirement) withDefaults() Requirement {
	if r.Count == 0 {
		r.Count = 1
	}
	if r.MinProvenance == "" {
		r.MinProvenance = grammar.ProvenanceClaimed
	}
	return r
}

// validate reports every problem of r through add, prefixed with base.
func (r Requirement) validate(base string, add func(string, ...any)) {
	switch {
	case !grammar.ValidCapabilityID(r.Select):
		add("%s.select: %q is not a capability id (1 to %d dot-separated words of a-z 0-9 _ -, at most %d bytes)",
			base, clip(r.Select), grammar.MaxCapabilitySegments, grammar.MaxCapabilityLen)
	case grammar.CapabilityFamily(r.Select) == grammar.TrustFamily:
		add("%s.select: %q: trust is assigned by operators and never advertised; the controller's policy sets the tier a workload needs", base, r.Select)
	}
	if r.Count < 0 || r.Count > MaxRequirementCount {
		add("%s.count: %d is not 1 to %d", base, r.Count, MaxRequirementCount)
	}
	if r.MinProvenance != "" {
		if _, ok := grammar.ProvenanceRank(r.MinProvenance); !ok {
			add("%s.min_provenance: %q is not %s, %s or %s", base, clip(r.MinProvenance),
				grammar.ProvenanceClaimed, grammar.ProvenanceProbed, grammar.ProvenanceMeasured)
		}
	}
	if len(r.Predicates) > MaxPredicates {
		add("%s.predicates: %d predicates, limit %d", base, len(r.Predicates), MaxPredicates)
		return
	}
	for i, p := range r.Predicates {
		pb := base + ".predicates[" + strconv.Itoa(i) + "]"
		if !grammar.ValidAttrName(p.Attr) {
			add("%s.attr: %q is not an attribute name (a-z 0-9 _, starting with a-z, at most %d)", pb, clip(p.Attr), grammar.MaxAttrNameLen)
		}
		switch {
		case !grammar.ValidPredicateOp(p.Op):
			add("%s.op: %q is not eq, gte, lte, in or has", pb, clip(p.Op))
		case !grammar.ValidPredicateOperand(p.Op, p.Value):
			add("%s.value: does not fit %s (eq and has take a bool, number or string; gte and lte a number; in a non-empty list)", pb, p.Op)
		}
	}
}

// validate reports every problem of t through add.
func (t *PerfTarget) validate(add func(string, ...any)) {
	switch {
	case !grammar.ValidCapabilityRecordID(t.ID):
		add("perf_target.id: %q is not a capability record id", clip(t.ID))
	case grammar.CapabilityFamily(t.ID) == grammar.TrustFamily:
		add("perf_target.id: %q is in the trust family", t.ID)
	}
	if !grammar.ValidAttrName(t.Param) {
		add("perf_target.param: %q is not an attribute name", clip(t.Param))
	}
	if !t.ParamValue.IsScalar() || t.ParamValue.Check() != nil {
		add("perf_target.param_value: must be a bool, number or string")
	}
	if t.Better != grammar.PerfBetterLower && t.Better != grammar.PerfBetterHigher {
		add("perf_target.better: %q is not %q or %q", clip(t.Better), grammar.PerfBetterLower, grammar.PerfBetterHigher)
	}
	if b := t.Budget; b != nil && (math.IsNaN(*b) || math.IsInf(*b, 0) || *b < 0) {
		add("perf_target.budget: %v is not a finite number of at least 0", *b)
	}
}

// validateRequirements checks a variant's requirements and execution.
func (v *Variant) validateRequirements(base string, add func(string, ...any)) {
	if len(v.Requirements) > MaxRequirements {
		add("%s.requirements: %d requirements, limit %d", base, len(v.Requirements), MaxRequirements)
	} else {
		for i, r := range v.Requirements {
			r.validate(base+".requirements["+strconv.Itoa(i)+"]", add)
		}
	}
	switch v.Execution {
	case "", grammar.ExecutionNative, grammar.ExecutionEmulated:
	default:
		add("%s.execution: %q is not %q or %q", base, clip(v.Execution), grammar.ExecutionNative, grammar.ExecutionEmulated)
	}
}

// checkNames checks a package's labels or excludes: at most
// MaxPackageLabels Names without repeats.
func checkNames(field string, list []string, add func(string, ...any)) {
	checkNameList(field, list, MaxPackageLabels, add)
}
