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

// Predicate operators compiled from grammar's names, so that matching
// compares small integers rather than strings.
const (
	codeEq uint8 = iota + 1
	codeGte
	codeLte
	codeIn
	codeHas
)

func opCode(op string) uint8 {
	switch op {
	case opEq:
		return codeEq
	case opGte:
		return codeGte
	case opLte:
		return codeLte
	case opIn:
		return codeIn
	case opHas:
		return codeHas
	default:
		return 0
	}
}

// holds evaluates a compiled predicate operator with attribute value attr
// and operand v. An unknown operator never holds.
func holds(op uint8, attr, v *Value) bool {
	switch op {
	case codeEq:
		return attr.equal(*v)
	case codeGte, codeLte:
		a, ok := attr.number()
		b, ok2 := v.number()
		if !ok || !ok2 {
			return false
		}
		if op == codeGte {
			return a >= b
		}
		return a <= b
	case codeIn:
		for i := range v.list {
			if attr.equal(v.list[i]) {
				return true
			}
		}
		return false
	case codeHas:
		if attr.kind != KindList {
			return false
		}
		for i := range attr.list {
			if attr.list[i].equal(*v) {
				return true
			}
		}
		return false
	default:
		return false
	}
}
