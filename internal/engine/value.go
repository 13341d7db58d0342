package engine

import (
	"math"
	"strconv"
	"strings"
)

// Value is a capability attribute value or a predicate operand: a bool,
// an integer, a float, a string, or a list of those. The zero Value is
// invalid (Kind KindInvalid). Values are immutable; build them with Bool,
// Int, Float, String and List.
type Value struct {
	kind ValueKind
	b    bool
	i    int64
	f    float64
	s    string
	list []Value
}

// ValueKind is the type of a Value.
type ValueKind uint8

// Value kinds.
const (
	KindInvalid ValueKind = iota
	KindBool
	KindInt
	KindFloat
	KindString
	KindList
)

// Bool returns a boolean Value.
func Bool(b bool) Value { return Value{kind: KindBool, b: b} }

// Int returns an integer Value.
func Int(i int64) Value { return Value{kind: KindInt, i: i} }

// Float returns a floating-point Value.
func Float(f float64) Value { return Value{kind: KindFloat, f: f} }

// String returns a string Value.
func String(s string) Value { return Value{kind: KindString, s: s} }

// List returns a list Value. Its elements should be scalars: a nested list
// is never equal to anything.
func List(vs ...Value) Value { return Value{kind: KindList, list: vs} }

// Kind returns the type of v.
func (v Value) Kind() ValueKind { return v.kind }

// number returns v as a float64 when it is an int or a float.
func (v Value) number() (float64, bool) {
	switch v.kind {
	case KindInt:
		return float64(v.i), true
	case KindFloat:
		return v.f, true
	default:
		return 0, false
	}
}

// scalar reports whether v is a bool, a number or a string.
func (v Value) scalar() bool {
	return v.kind >= KindBool && v.kind <= KindString
}

// equal is loose equality: integers and floats compare numerically
// (integers exactly with each other), other scalars by kind and value;
// lists are never equal.
func (v Value) equal(w Value) bool {
	switch {
	case v.kind == KindInt && w.kind == KindInt:
		return v.i == w.i
	case (v.kind == KindInt || v.kind == KindFloat) && (w.kind == KindInt || w.kind == KindFloat):
		a, _ := v.number()
		b, _ := w.number()
		return a == b
	case v.kind != w.kind:
		return false
	case v.kind == KindBool:
		return v.b == w.b
	case v.kind == KindString:
		return v.s == w.s
	default:
		return false
	}
}

// finite reports whether v holds no NaN or infinity, in itself or in a
// list element.
func (v Value) finite() bool {
	switch v.kind {
	case KindFloat:
		return !math.IsNaN(v.f) && !math.IsInf(v.f, 0)
	case KindList:
		for _, e := range v.list {
			if !e.finite() {
				return false
			}
		}
	}
	return true
}

// String formats v for explanations: numbers in decimal, strings as they
// are, lists in brackets.
func (v Value) String() string {
	switch v.kind {
	case KindBool:
		return strconv.FormatBool(v.b)
	case KindInt:
		return strconv.FormatInt(v.i, 10)
	case KindFloat:
		return strconv.FormatFloat(v.f, 'f', -1, 64)
	case KindString:
		return v.s
	case KindList:
		var b strings.Builder
		b.WriteByte('[')
		for i, e := range v.list {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(e.String())
		}
		b.WriteByte(']')
		return b.String()
	default:
		return "<invalid>"
	}
}

// holds evaluates the predicate operator op with attribute value attr and
// operand v. Operators are grammar's; an unknown one never holds.
func holds(op string, attr, v Value) bool {
	switch op {
	case opEq:
		return attr.equal(v)
	case opGte, opLte:
		a, ok := attr.number()
		b, ok2 := v.number()
		if !ok || !ok2 {
			return false
		}
		if op == opGte {
			return a >= b
		}
		return a <= b
	case opIn:
		for _, e := range v.list {
			if attr.equal(e) {
				return true
			}
		}
		return false
	case opHas:
		if attr.kind != KindList {
			return false
		}
		for _, e := range attr.list {
			if e.equal(v) {
				return true
			}
		}
		return false
	default:
		return false
	}
}
