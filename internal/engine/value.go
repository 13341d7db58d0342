package engine

import (
	"math"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Capability attributes and predicate operands are grammar.Value: one
// definition for facts, manifests and the engine. What the engine adds is
// how predicates compare them (looseEqual, holds) and how explanations
// print them (valueText).

// looseEqual is a predicate's equality: integers and floats compare
// numerically (integers exactly with each other), other scalars by kind
// and value; lists are never equal, nor are invalid Values.
func looseEqual(v, w grammar.Value) bool {
	vk, wk := v.Kind(), w.Kind()
	switch {
	case vk == grammar.KindInt && wk == grammar.KindInt:
		a, _ := v.Int()
		b, _ := w.Int()
		return a == b
	case isNumber(vk) && isNumber(wk):
		a, _ := v.Number()
		b, _ := w.Number()
		return a == b
	case vk != wk:
		return false
	case vk == grammar.KindBool:
		a, _ := v.Bool()
		b, _ := w.Bool()
		return a == b
	case vk == grammar.KindString:
		a, _ := v.Str()
		b, _ := w.Str()
		return a == b
	default:
		return false
	}
}

func isNumber(k grammar.ValueKind) bool { return k == grammar.KindInt || k == grammar.KindFloat }

// finite reports whether v holds no NaN or infinity, in itself or in a
// list element.
func finite(v grammar.Value) bool {
	switch v.Kind() {
	case grammar.KindFloat:
		f, _ := v.Number()
		return !math.IsNaN(f) && !math.IsInf(f, 0)
	case grammar.KindList:
		for i := range v.Len() {
			if !finite(v.Elem(i)) {
				return false
			}
		}
	}
	return true
}

// valueText formats v for explanations: numbers in decimal, strings as
// they are, lists in brackets.
func valueText(v grammar.Value) string {
	switch v.Kind() {
	case grammar.KindBool:
		b, _ := v.Bool()
		return strconv.FormatBool(b)
	case grammar.KindInt:
		i, _ := v.Int()
		return strconv.FormatInt(i, 10)
	case grammar.KindFloat:
		f, _ := v.Number()
		return strconv.FormatFloat(f, 'f', -1, 64)
	case grammar.KindString:
		s, _ := v.Str()
		return s
	case grammar.KindList:
		var b strings.Builder
		b.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(valueText(v.Elem(i)))
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
func holds(op uint8, attr, v *grammar.Value) bool {
	switch op {
	case codeEq:
		return looseEqual(*attr, *v)
	case codeGte, codeLte:
		a, ok := attr.Number()
		b, ok2 := v.Number()
		if !ok || !ok2 {
			return false
		}
		if op == codeGte {
			return a >= b
		}
		return a <= b
	case codeIn:
		for i := range v.Len() {
			if looseEqual(*attr, v.Elem(i)) {
				return true
			}
		}
		return false
	case codeHas:
		if attr.Kind() != grammar.KindList {
			return false
		}
		for i := range attr.Len() {
			if looseEqual(attr.Elem(i), *v) {
				return true
			}
		}
		return false
	default:
		return false
	}
}
