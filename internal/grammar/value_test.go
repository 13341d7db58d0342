package grammar

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValueJSON(t *testing.T) {
	tests := []struct {
		name string
		give string
		want Value
		enc  string // the encoding of want; give when empty
	}{
		{name: "true", give: "true", want: BoolValue(true)},
		{name: "false", give: " false ", want: BoolValue(false), enc: "false"},
		{name: "int", give: "42", want: IntValue(42)},
		{name: "negative int", give: "-7", want: IntValue(-7)},
		{name: "negative zero is an int", give: "-0", want: IntValue(0), enc: "0"},
		{name: "largest int", give: "9223372036854775807", want: IntValue(math.MaxInt64)},
		{name: "float", give: "2.5", want: FloatValue(2.5)},
		{name: "whole float keeps its kind", give: "3.0", want: FloatValue(3)},
		{name: "exponent is a float", give: "1e3", want: FloatValue(1000), enc: "1000.0"},
		{name: "big float", give: "1e21", want: FloatValue(1e21), enc: "1e+21"},
		{name: "string", give: `"a100"`, want: StringValue("a100")},
		{name: "escaped string", give: `"\u00e9<"`, want: StringValue("é<"), enc: `"é\u003c"`},
		{name: "list", give: `[1, "a", true, 2.5]`, want: ListValue(IntValue(1), StringValue("a"), BoolValue(true), FloatValue(2.5)), enc: `[1,"a",true,2.5]`},
		{name: "empty list", give: `[]`, want: ListValue()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Value
			if err := json.Unmarshal([]byte(tt.give), &got); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
			enc, err := json.Marshal(got)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			want := tt.enc
			if want == "" {
				want = tt.give
			}
			if string(enc) != want {
				t.Errorf("encoded %s, want %s", enc, want)
			}
		})
	}
}

func TestValueJSONRefuses(t *testing.T) {
	long := `"` + strings.Repeat("a", MaxValueStringLen+1) + `"`
	longList := "[" + strings.Repeat("1,", MaxValueListLen) + "1]"
	for _, give := range []string{
		`null`, `{}`, `{"a":1}`, `[[1]]`, `[null]`, `[{}]`, long, "[" + long + "]", longList,
		`9223372036854775808`, `1e400`, `-1e400`, `"\xff"`, `[1]x`, ``, `tru`,
	} {
		var v Value
		err := v.UnmarshalJSON([]byte(give))
		if err == nil {
			t.Errorf("UnmarshalJSON(%.40q) accepted %+v", give, v)
		}
	}
	// Through encoding/json too, inside a document.
	var doc struct{ V Value }
	if err := json.Unmarshal([]byte(`{"V":null}`), &doc); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("null in a document: %v, want ErrInvalidValue", err)
	}
}

func TestValueCheck(t *testing.T) {
	for _, v := range []Value{
		{}, FloatValue(math.NaN()), FloatValue(math.Inf(1)), StringValue("\xff"),
		StringValue(strings.Repeat("a", MaxValueStringLen+1)),
		ListValue(ListValue()), ListValue(Value{}), ListValue(make([]Value, MaxValueListLen+1)...),
	} {
		if v.Check() == nil {
			t.Errorf("Check(%+v) passed", v)
		}
		if _, err := json.Marshal(v); err == nil {
			t.Errorf("Marshal(%+v) passed", v)
		}
	}
}

func TestValueAccessors(t *testing.T) {
	if n, ok := IntValue(3).Number(); !ok || n != 3 {
		t.Error("int Number")
	}
	if n, ok := FloatValue(2.5).Number(); !ok || n != 2.5 {
		t.Error("float Number")
	}
	if _, ok := StringValue("3").Number(); ok {
		t.Error("string has a Number")
	}
	if IntValue(1).Equal(FloatValue(1)) {
		t.Error("Equal is loose")
	}
	l := ListValue(IntValue(1))
	elems, _ := l.List()
	elems[0] = IntValue(2)
	if !l.Equal(ListValue(IntValue(1))) {
		t.Error("List exposes the elements")
	}
	if l.Len() != 1 || !l.Elem(0).Equal(IntValue(1)) || IntValue(1).Len() != 0 {
		t.Error("Len and Elem")
	}
}

func TestValidPredicateOperand(t *testing.T) {
	str, num, list := StringValue("a"), IntValue(1), ListValue(StringValue("a"))
	tests := []struct {
		op   string
		v    Value
		want bool
	}{
		{OpEq, str, true}, {OpEq, num, true}, {OpEq, BoolValue(true), true}, {OpEq, list, false},
		{OpGte, num, true}, {OpLte, FloatValue(0.5), true}, {OpGte, str, false},
		{OpIn, list, true}, {OpIn, ListValue(), false}, {OpIn, str, false},
		{OpHas, str, true}, {OpHas, list, false},
		{"ne", str, false}, {OpEq, Value{}, false}, {OpEq, FloatValue(math.NaN()), false},
	}
	for _, tt := range tests {
		if got := ValidPredicateOperand(tt.op, tt.v); got != tt.want {
			t.Errorf("ValidPredicateOperand(%s, %+v) = %v, want %v", tt.op, tt.v, got, tt.want)
		}
	}
}

func FuzzValueJSON(f *testing.F) {
	for _, s := range []string{`1`, `-2.5e3`, `"x"`, `[1,"a",false]`, `[[1]]`, `null`, `1e999`, `"\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v Value
		if err := v.UnmarshalJSON(data); err != nil {
			return
		}
		if err := v.Check(); err != nil {
			t.Fatalf("decoded an invalid value: %v", err)
		}
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back Value
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("re-decode %s: %v", enc, err)
		}
		if !back.Equal(v) {
			t.Fatalf("round trip changed %s", enc)
		}
	})
}
