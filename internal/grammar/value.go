package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"
)

// Bounds of a Value.
const (
	// MaxValueStringLen bounds a string Value, and each string in a list,
	// in bytes.
	MaxValueStringLen = 256
	// MaxValueListLen bounds the elements of a list Value.
	MaxValueListLen = 64
	// maxValueJSONLen bounds the JSON text of one Value before it is
	// decoded: a full list of the longest strings, every byte escaped as
	// \uXXXX, with separators.
	maxValueJSONLen = 2 + MaxValueListLen*(6*MaxValueStringLen+3)
)

// ValueKind says what a Value holds.
type ValueKind uint8

// The kinds of a Value. The zero Value is KindInvalid and holds nothing.
const (
	KindInvalid ValueKind = iota
	KindBool
	KindInt
	KindFloat
	KindString
	KindList
)

// String names the kind as error messages do.
func (k ValueKind) String() string {
	switch k {
	case KindBool:
		return "bool"
	case KindInt:
		return "int"
	case KindFloat:
		return "float"
	case KindString:
		return "string"
	case KindList:
		return "list"
	default:
		return "invalid"
	}
}

// Value is a capability attribute value or a predicate operand: a bool, an
// integer (int64), a finite float, a string, or a list of those scalars
// (never of lists). It is immutable; build one with BoolValue, IntValue,
// FloatValue, StringValue or ListValue, or decode one from JSON.
//
// In JSON an integer is a number without a fraction or exponent that fits
// int64 ("3"); any other number is a float ("3.0", "1e3"), and a float
// always encodes with a fraction or exponent, so a Value survives a JSON
// round trip with its kind. null and objects are not Values.
type Value struct {
	kind ValueKind
	b    bool
	i    int64
	f    float64
	s    string
	list []Value
}

// BoolValue returns a bool Value.
func BoolValue(b bool) Value { return Value{kind: KindBool, b: b} }

// IntValue returns an integer Value.
func IntValue(i int64) Value { return Value{kind: KindInt, i: i} }

// FloatValue returns a float Value; it is invalid (Check) when f is NaN
// or infinite.
func FloatValue(f float64) Value { return Value{kind: KindFloat, f: f} }

// StringValue returns a string Value; it is invalid (Check) when s is
// longer than MaxValueStringLen or not UTF-8.
func StringValue(s string) Value { return Value{kind: KindString, s: s} }

// ListValue returns a list Value holding a copy of elems; it is invalid
// (Check) when an element is not a valid scalar or there are more than
// MaxValueListLen.
func ListValue(elems ...Value) Value {
	return Value{kind: KindList, list: append([]Value{}, elems...)}
}

// Kind returns what v holds.
func (v Value) Kind() ValueKind { return v.kind }

// Bool returns v's bool, and whether v is one.
func (v Value) Bool() (bool, bool) { return v.b, v.kind == KindBool }

// Int returns v's integer, and whether v is one.
func (v Value) Int() (int64, bool) { return v.i, v.kind == KindInt }

// Str returns v's string, and whether v is one.
func (v Value) Str() (string, bool) { return v.s, v.kind == KindString }

// Number returns v as a float64 when v is an integer or a float: the
// numeric reading that gte, lte and a loose eq compare.
func (v Value) Number() (float64, bool) {
	switch v.kind {
	case KindInt:
		return float64(v.i), true
	case KindFloat:
		return v.f, true
	default:
		return 0, false
	}
}

// List returns a copy of v's elements, and whether v is a list.
func (v Value) List() ([]Value, bool) {
	if v.kind != KindList {
		return nil, false
	}
	return append([]Value{}, v.list...), true
}

// Len returns the number of elements of a list, 0 for any other Value.
func (v Value) Len() int { return len(v.list) }

// Elem returns element i of a list (0 <= i < Len), without copying the
// list; it panics when i is out of range.
func (v Value) Elem(i int) Value { return v.list[i] }

// IsScalar reports whether v is a bool, integer, float or string.
func (v Value) IsScalar() bool {
	return v.kind == KindBool || v.kind == KindInt || v.kind == KindFloat || v.kind == KindString
}

// Equal reports whether v and w hold the same kind and the same value
// (lists element by element). It is exact: IntValue(1) does not equal
// FloatValue(1); a predicate's loose numeric equality compares Number.
func (v Value) Equal(w Value) bool {
	if v.kind != w.kind {
		return false
	}
	switch v.kind {
	case KindBool:
		return v.b == w.b
	case KindInt:
		return v.i == w.i
	case KindFloat:
		return v.f == w.f
	case KindString:
		return v.s == w.s
	case KindList:
		if len(v.list) != len(w.list) {
			return false
		}
		for i := range v.list {
			if !v.list[i].Equal(w.list[i]) {
				return false
			}
		}
		return true
	default:
		return true
	}
}

// ErrInvalidValue is wrapped by every refusal of Check and of decoding.
var ErrInvalidValue = errors.New("invalid value")

// Check reports why v is not a valid Value: the zero Value, a float that
// is not finite, a string over MaxValueStringLen or not UTF-8, a list
// over MaxValueListLen or holding a list or an invalid element.
func (v Value) Check() error {
	switch v.kind {
	case KindBool, KindInt:
		return nil
	case KindFloat:
		if math.IsNaN(v.f) || math.IsInf(v.f, 0) {
			return fmt.Errorf("%w: float is not finite", ErrInvalidValue)
		}
		return nil
	case KindString:
		if len(v.s) > MaxValueStringLen || !utf8.ValidString(v.s) {
			return fmt.Errorf("%w: string must be at most %d bytes of UTF-8", ErrInvalidValue, MaxValueStringLen)
		}
		return nil
	case KindList:
		if len(v.list) > MaxValueListLen {
			return fmt.Errorf("%w: list of %d elements, at most %d", ErrInvalidValue, len(v.list), MaxValueListLen)
		}
		for i, e := range v.list {
			if !e.IsScalar() {
				return fmt.Errorf("%w: list element %d is not a bool, number or string", ErrInvalidValue, i)
			}
			if err := e.Check(); err != nil {
				return fmt.Errorf("list element %d: %w", i, err)
			}
		}
		return nil
	default:
		return fmt.Errorf("%w: no value", ErrInvalidValue)
	}
}

// ValidPredicateOperand reports whether v fits operator op: eq and has
// take a scalar, gte and lte a number, in a non-empty list.
func ValidPredicateOperand(op string, v Value) bool {
	if v.Check() != nil {
		return false
	}
	switch op {
	case OpEq, OpHas:
		return v.IsScalar()
	case OpGte, OpLte:
		_, ok := v.Number()
		return ok
	case OpIn:
		return v.kind == KindList && len(v.list) > 0
	default:
		return false
	}
}

// MarshalJSON encodes v; an invalid v (Check) is an error.
func (v Value) MarshalJSON() ([]byte, error) {
	if err := v.Check(); err != nil {
		return nil, err
	}
	return v.appendJSON(nil)
}

func (v Value) appendJSON(b []byte) ([]byte, error) {
	switch v.kind {
	case KindBool:
		return strconv.AppendBool(b, v.b), nil
	case KindInt:
		return strconv.AppendInt(b, v.i, 10), nil
	case KindFloat:
		start := len(b)
		b = strconv.AppendFloat(b, v.f, 'g', -1, 64)
		if !bytes.ContainsAny(b[start:], ".eE") {
			b = append(b, ".0"...)
		}
		return b, nil
	case KindString:
		s, err := json.Marshal(v.s)
		return append(b, s...), err
	case KindList:
		b = append(b, '[')
		for i, e := range v.list {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = e.appendJSON(b); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	default:
		return nil, fmt.Errorf("%w: no value", ErrInvalidValue)
	}
}

// UnmarshalJSON decodes a Value, refusing null, objects, nested lists,
// integers beyond int64, numbers beyond float64, and anything over the
// bounds; list elements are counted as they are read.
func (v *Value) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > maxValueJSONLen {
		return fmt.Errorf("%w: %d bytes of JSON, at most %d", ErrInvalidValue, len(data), maxValueJSONLen)
	}
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidValue)
	}
	if data[0] != '[' {
		s, err := scalarFromJSON(data)
		if err != nil {
			return err
		}
		*v = s
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '['
		return fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	var list []Value
	for dec.More() {
		if len(list) == MaxValueListLen {
			return fmt.Errorf("%w: list longer than %d", ErrInvalidValue, MaxValueListLen)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidValue, err)
		}
		if len(raw) > 0 && raw[0] == '[' {
			return fmt.Errorf("%w: a list may not hold a list", ErrInvalidValue)
		}
		e, err := scalarFromJSON(raw)
		if err != nil {
			return fmt.Errorf("list element %d: %w", len(list), err)
		}
		list = append(list, e)
	}
	if _, err := dec.Token(); err != nil { // ']'
		return fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the list", ErrInvalidValue)
	}
	*v = Value{kind: KindList, list: list}
	if list == nil {
		v.list = []Value{}
	}
	return nil
}

// scalarFromJSON decodes one JSON scalar that is not null.
func scalarFromJSON(data []byte) (Value, error) {
	switch c := data[0]; {
	case c == 't' || c == 'f':
		var b bool
		if err := json.Unmarshal(data, &b); err != nil {
			return Value{}, fmt.Errorf("%w: %v", ErrInvalidValue, err)
		}
		return BoolValue(b), nil
	case c == '"':
		if len(data) > 2+6*MaxValueStringLen {
			return Value{}, fmt.Errorf("%w: string longer than %d bytes", ErrInvalidValue, MaxValueStringLen)
		}
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return Value{}, fmt.Errorf("%w: %v", ErrInvalidValue, err)
		}
		v := StringValue(s)
		return v, v.Check()
	case c == '-' || '0' <= c && c <= '9':
		var n json.Number
		if err := json.Unmarshal(data, &n); err != nil {
			return Value{}, fmt.Errorf("%w: %v", ErrInvalidValue, err)
		}
		if !bytes.ContainsAny(data, ".eE") {
			i, err := strconv.ParseInt(string(n), 10, 64)
			if err != nil {
				return Value{}, fmt.Errorf("%w: integer %s does not fit 64 bits", ErrInvalidValue, clipJSON(data))
			}
			return IntValue(i), nil
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return Value{}, fmt.Errorf("%w: number %s does not fit a float", ErrInvalidValue, clipJSON(data))
		}
		return FloatValue(f), nil
	default:
		return Value{}, fmt.Errorf("%w: want a bool, number, string or list of those", ErrInvalidValue)
	}
}

// clipJSON bounds JSON text quoted in an error.
func clipJSON(data []byte) string {
	const n = 32
	if len(data) <= n {
		return string(data)
	}
	return string(data[:n]) + "..."
}
