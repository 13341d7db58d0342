package engine

import (
	"errors"
	"fmt"
	"math"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Validate reports every problem of the request at once (reference
// 3.6.1), each naming where it is ("variants[1].requirements[0].count:
// ..."). It is static: it looks at no node.
func (r *Request) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if !grammar.ValidName(r.Kind) {
		add("kind %q: want %s", clip(r.Kind), grammar.NameSyntax)
	}
	if !validText(r.Name) {
		add("name %q: want 1 to %d bytes of printable ASCII", clip(r.Name), MaxTextLen)
	}
	validateRequirements(add, func() string { return "requirements" }, r.Requirements)
	switch {
	case len(r.Variants) == 0:
		add("variants: none; a request needs at least one")
	case len(r.Variants) > MaxVariants:
		add("variants: %d, at most %d", len(r.Variants), MaxVariants)
	}
	for i := range r.Variants {
		v := &r.Variants[i]
		if !grammar.ValidName(v.Name) {
			add("variants[%d].name %q: want %s", i, clip(v.Name), grammar.NameSyntax)
		}
		for _, w := range r.Variants[:i] {
			if w.Name == v.Name {
				add("variants[%d].name %q: given twice", i, clip(v.Name))
				break
			}
		}
		if v.Execution != Native && v.Execution != Emulated {
			add("variants[%d].execution: %d is neither native nor emulated", i, v.Execution)
		}
		if len(v.Requirements) > 0 {
			validateRequirements(add, func() string { return fmt.Sprintf("variants[%d].requirements", i) }, v.Requirements)
		}
	}
	validateTexts(add, "labels", r.Labels)
	validateTexts(add, "excludes", r.Excludes)
	validateTexts(add, "revocable_refs", r.RevocableRefs)
	if r.MinTrust < TrustDiscovered || r.MinTrust > TrustPinned {
		add("min_trust: %s; want discovered, paired or pinned", r.MinTrust)
	}
	if r.MinProvenance != "" {
		if _, ok := grammar.ProvenanceRank(r.MinProvenance); !ok {
			add("min_provenance %q: want claimed, probed or measured", clip(r.MinProvenance))
		}
	}
	if len(r.Preferences) > MaxListLen {
		add("preferences: %d, at most %d", len(r.Preferences), MaxListLen)
	}
	for i := range r.Preferences {
		p := &r.Preferences[i]
		validateRequirement(add, func() string { return fmt.Sprintf("preferences[%d].requirement", i) }, &p.Requirement)
		if !finiteNonNegative(p.Weight) {
			add("preferences[%d].weight: %v is not a finite number >= 0", i, p.Weight)
		}
	}
	if p := r.Perf; p != nil {
		if !grammar.ValidCapabilityRecordID(p.ID) {
			add("perf.id %q: not a capability record id", clip(p.ID))
		}
		if p.Param != "" {
			if !grammar.ValidAttrName(p.Param) {
				add("perf.param %q: not an attribute name", clip(p.Param))
			}
			if !p.ParamValue.IsScalar() || !finite(p.ParamValue) {
				add("perf.param_value: want a finite scalar")
			}
		}
		if p.Better != BetterLower && p.Better != BetterHigher {
			add("perf.better: want lower or higher")
		}
		if p.HasBudget && !finiteNonNegative(p.Budget) {
			add("perf.budget: %v is not a finite number >= 0", p.Budget)
		}
	}
	for _, f := range []struct{ name, id string }{{"current_node", r.CurrentNode}, {"pin", r.Pin}} {
		if f.id != "" && !validText(f.id) {
			add("%s %q: want 1 to %d bytes of printable ASCII", f.name, clip(f.id), MaxTextLen)
		}
	}
	validateTexts(add, "prefer", r.Prefer)
	validateTexts(add, "avoid", r.Avoid)
	return errors.Join(errs...)
}

// validateRequirements checks a list of requirements; at gives its path,
// only formatted for a problem.
func validateRequirements(add func(string, ...any), at func() string, reqs []Requirement) {
	if len(reqs) > MaxRequirements {
		add("%s: %d, at most %d", at(), len(reqs), MaxRequirements)
	}
	for i := range reqs {
		validateRequirement(add, func() string { return fmt.Sprintf("%s[%d]", at(), i) }, &reqs[i])
	}
}

// validateRequirement checks one requirement; at gives its path, only
// formatted for a problem, since valid requests are the rule.
func validateRequirement(add func(string, ...any), at func() string, q *Requirement) {
	switch {
	case !grammar.ValidCapabilityID(q.Selector):
		add("%s.selector %q: not a capability id", at(), clip(q.Selector))
	case grammar.CapabilityFamily(q.Selector) == grammar.TrustFamily:
		add("%s.selector %q: trust is assigned by operators, never a capability", at(), q.Selector)
	}
	if q.Count < 0 || q.Count > MaxCount {
		add("%s.count: %d, want 1 to %d (0 means 1)", at(), q.Count, MaxCount)
	}
	if q.MinProvenance != "" {
		if _, ok := grammar.ProvenanceRank(q.MinProvenance); !ok {
			add("%s.min_provenance %q: want claimed, probed or measured", at(), clip(q.MinProvenance))
		}
	}
	if len(q.Predicates) > MaxPredicates {
		add("%s.predicates: %d, at most %d", at(), len(q.Predicates), MaxPredicates)
	}
	for j := range q.Predicates {
		p := &q.Predicates[j]
		if !grammar.ValidAttrName(p.Attr) {
			add("%s.predicates[%d].attr %q: not an attribute name", at(), j, clip(p.Attr))
		}
		if problem := operandProblem(p.Op, p.Value); problem != "" {
			add("%s.predicates[%d]: %s", at(), j, problem)
		}
	}
}

// operandProblem says what is wrong with a predicate's operator or
// operand, or returns "".
func operandProblem(op string, v grammar.Value) string {
	if !grammar.ValidPredicateOp(op) {
		return fmt.Sprintf("op %q: want eq, gte, lte, in or has", clip(op))
	}
	if !finite(v) {
		return fmt.Sprintf("%s: operand is not finite", op)
	}
	switch op {
	case opEq, opHas:
		if !v.IsScalar() {
			return fmt.Sprintf("%s: operand must be a bool, number or string", op)
		}
	case opGte, opLte:
		if _, ok := v.Number(); !ok {
			return fmt.Sprintf("%s: operand must be a number", op)
		}
	case opIn:
		if v.Kind() != grammar.KindList || v.Len() == 0 || v.Len() > MaxOperandList {
			return fmt.Sprintf("in: operand must be a list of 1 to %d values", MaxOperandList)
		}
		for i := range v.Len() {
			if !v.Elem(i).IsScalar() {
				return "in: list elements must be bools, numbers or strings"
			}
		}
	}
	return ""
}

func validateTexts(add func(string, ...any), at string, list []string) {
	if len(list) > MaxListLen {
		add("%s: %d entries, at most %d", at, len(list), MaxListLen)
	}
	for i, s := range list {
		if !validText(s) {
			add("%s[%d] %q: want 1 to %d bytes of printable ASCII", at, i, clip(s), MaxTextLen)
		}
	}
}

// validText reports whether s is 1 to MaxTextLen bytes of printable ASCII.
func validText(s string) bool {
	return s != "" && len(s) <= MaxTextLen && printableASCII(s)
}

// printableASCII is grammar.PrintableASCII eight bytes at a time, for
// node ids, which every decision checks: a word has a byte below 0x20
// when subtracting 0x20 from each byte borrows into a byte whose top bit
// was clear, and one above 0x7e when adding 1 sets a top bit.
func printableASCII(s string) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		b := s[i : i+8] // one bounds check; the eight loads become one
		w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		if (w-ones*0x20)&^w&tops != 0 || ((w+ones)|w)&tops != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// clip bounds what an error message repeats of a bad input.
func clip(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// validateNodes checks node ids: each valid, none twice. Problems are
// listed in the order of ids.
func validateNodes(nodes []Node, byID idOrder) error {
	ok := true
	for i := range nodes {
		ok = ok && validText(nodes[i].ID)
	}
	for k := 1; k < len(byID.refs) && ok; k++ {
		a, b := byID.refs[k-1], byID.refs[k]
		ok = a.key != b.key || nodes[a.i].ID != nodes[b.i].ID
	}
	if ok {
		return nil
	}
	var errs []error
	for k, r := range byID.refs {
		id := nodes[r.i].ID
		if !validText(id) {
			errs = append(errs, fmt.Errorf("node[%d] id %q: want 1 to %d bytes of printable ASCII", r.i, clip(id), MaxTextLen))
		}
		if k > 0 && nodes[byID.refs[k-1].i].ID == id {
			errs = append(errs, fmt.Errorf("node id %q given twice", clip(id)))
		}
	}
	return fmt.Errorf("%w: %w", ErrInvalidNodes, errors.Join(errs...))
}

// finitePerf reports whether a measured figure is usable.
func finitePerf(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) && f >= 0 }
