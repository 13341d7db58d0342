package modelpin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// refTopLevelMembers is the encoding/json walk Pin used before
// jsonScan: the reference the scanner is fuzzed against.
func refTopLevelMembers(body []byte) ([]member, int, error) {
	if !json.Valid(body) {
		return nil, 0, ErrNotObject
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return nil, 0, ErrNotObject
	}
	open := int(dec.InputOffset()) - 1
	var members []member
	for dec.More() {
		prev := int(dec.InputOffset())
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, 0, ErrNotObject
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, 0, ErrNotObject
		}
		end := int(dec.InputOffset())
		ks := prev
		for ks < len(body) && body[ks] != '"' {
			ks++
		}
		members = append(members, member{keyStart: ks, valueStart: end - len(raw), end: end,
			model: len(key) == 5 && bytes.EqualFold([]byte(key), []byte("model"))})
	}
	return members, open, nil
}

// topLevelMembers is the jsonScan walk Pin made before heldMembers (a
// Reader's scanner, fed the body in one chunk): the reference heldMembers
// is fuzzed against, and the way jsonScan's own tests read its events.
func topLevelMembers(body []byte, rec *memberRecorder) ([]member, int, error) {
	rec.members, rec.cur, rec.open = nil, member{}, 0
	var sc jsonScan
	if err := sc.feed(body, rec); err != nil {
		return nil, 0, err
	}
	if err := sc.finish(); err != nil {
		return nil, 0, err
	}
	return rec.members, rec.open, nil
}

// memberRecorder collects the top-level members jsonScan reports.
type memberRecorder struct {
	members []member
	cur     member
	open    int
}

func (r *memberRecorder) objOpen(i int)         { r.open = i }
func (r *memberRecorder) keyStart(i int)        { r.cur = member{keyStart: i} }
func (r *memberRecorder) keyDecided(model bool) { r.cur.model = model }
func (r *memberRecorder) valueStart(i int)      { r.cur.valueStart = i }
func (r *memberRecorder) valueEnd(i int)        { r.cur.end = i; r.members = append(r.members, r.cur) }
func (r *memberRecorder) comma(int)             {}
func (r *memberRecorder) objClose(int)          {}

// scanners are the two walks of a held body, each of which must find
// what encoding/json finds.
var scanners = []struct {
	name string
	scan func([]byte) ([]member, int, error)
}{
	{"jsonScan", func(b []byte) ([]member, int, error) { return topLevelMembers(b, new(memberRecorder)) }},
	{"heldMembers", func(b []byte) ([]member, int, error) { return heldMembers(b, nil) }},
}

func TestJSONScanMembers(t *testing.T) {
	tests := []struct {
		give string
		want []member
	}{
		{`{}`, nil},
		{` { "a" : 1 , "MODEL":"x","b":[1,{"model":2}], "mo\u0064el" :null}  `, []member{
			{keyStart: 3, valueStart: 9, end: 10},
			{keyStart: 13, valueStart: 21, end: 24, model: true},
			{keyStart: 25, valueStart: 29, end: 44},
			{keyStart: 46, valueStart: 60, end: 64, model: true},
		}},
		{`{"modelx":1,"mode":2,"m\u00f6del":3,"":4}`, []member{
			{keyStart: 1, valueStart: 10, end: 11},
			{keyStart: 12, valueStart: 19, end: 20},
			{keyStart: 21, valueStart: 34, end: 35},
			{keyStart: 36, valueStart: 39, end: 40},
		}},
		{`{"n":-0.5e+10,"t":true}`, []member{{keyStart: 1, valueStart: 5, end: 13}, {keyStart: 14, valueStart: 18, end: 22}}},
	}
	for _, sc := range scanners {
		for _, tt := range tests {
			got, _, err := sc.scan([]byte(tt.give))
			if err != nil {
				t.Fatalf("%s: %s: %v", sc.name, tt.give, err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(member{})); diff != "" {
				t.Errorf("%s: %s (-want +got):\n%s", sc.name, tt.give, diff)
			}
		}
		for _, bad := range []string{``, ` `, `[]`, `"x"`, `1`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{"a":01}`,
			`{"a":1.}`, `{"a":-}`, `{"a":1e}`, `{"a":tru}`, `{"a":"\x"}`, `{"a":"\u12g4"}`, "{\"a\":\"\x01\"}",
			`{"a":[1,]}`, `{"a":[1}`, `{"a":{]}`, `{} {}`, `{}x`, `{"a":1 "b":2}`, `{'a':1}`, `{"a":nul}`,
			`{"a":"\u12"}`, `{"a":"x\`, `{"a":{"b"}}`, `{"a":{"b":1,}}`, `{"a":-01}`, `{"a":1e+}`, `{"a":[1 2]}`} {
			if _, _, err := sc.scan([]byte(bad)); err == nil {
				t.Errorf("%s: %q accepted", sc.name, bad)
			}
		}
		deep := strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth)
		if _, _, err := sc.scan([]byte(`{"a":` + deep + `}`)); err == nil {
			t.Errorf("%s: nesting over %d accepted", sc.name, maxJSONDepth)
		}
		ok := strings.Repeat("[", maxJSONDepth-1) + strings.Repeat("]", maxJSONDepth-1)
		if _, _, err := sc.scan([]byte(`{"a":` + ok + `}`)); err != nil {
			t.Errorf("%s: nesting of %d refused: %v", sc.name, maxJSONDepth, err)
		}
	}
}

// Both scanners accept exactly what json.Valid accepts (when the text is
// an object) and find the members encoding/json finds, at the same
// offsets.
func FuzzJSONScan(f *testing.F) {
	for _, s := range []string{`{"model":"a","messages":[{"role":"user","content":"hi \"x\" \u00e9"}],"t":0.5e-3,"n":null}`,
		`{"Mod\u0065L":[true,false,{}]}`, `{"a":1}  `, `[1]`, `{"a":01}`, `{"a":"` + "\x7f\xff" + `"}`,
		// Long runs, which plainRun skips in windows: a special past
		// the first windows, a control byte, a key after a long value.
		`{"a":"` + strings.Repeat("x", 300) + `\"` + strings.Repeat("y", 90) + `","model":"m"}`,
		`{"a":"` + strings.Repeat("x", 200) + "\x01" + `"}`, `{"` + strings.Repeat("k", 70) + `":1,"model":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantOpen, wantErr := refTopLevelMembers(b)
		for _, sc := range scanners {
			got, open, err := sc.scan(b)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("%s: %q: scan error %v, encoding/json %v", sc.name, b, err, wantErr)
			}
			if err != nil {
				continue
			}
			if open != wantOpen {
				t.Fatalf("%s: %q: '{' at %d, want %d", sc.name, b, open, wantOpen)
			}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(member{})); diff != "" {
				t.Fatalf("%s: %q (-want +got):\n%s", sc.name, b, diff)
			}
		}
	})
}

// heldMembers answers as jsonScan does (the walk Pin made before it), on
// any bytes: the same error, '{' and members. Its seeds reach each of its
// branches: escaped and long keys, nesting, numbers, literals and what
// breaks each of them.
func FuzzHeldMembers(f *testing.F) {
	for _, s := range []string{`{"model":"a","messages":[{"role":"user","content":"hi \"x\" \u00e9"}],"t":0.5e-3,"n":null}`,
		`{"Mod\u0065L":[true,false,{}]}`, `{"MODEL":1,"mode":2,"models":3,"m\u00f6del":4,"mo\/del":5,"\u004dodel":6}`,
		` {"a" : { "b" : [ 1 , { } , [ ] , -0.1E-9 ] } , "model" : "x" } `, `{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
		`{"a":{"b":1,"c":}}`, `{"a":[1,]}`, `{"a":{"b" 1}}`, `{"a":"` + strings.Repeat("x", 300) + `\"` + strings.Repeat("y", 90) + `"}`,
		`{"` + strings.Repeat("k", 70) + `":1,"model":2}`, `{"a":-}`, `{"a":1.e5}`, `{"a":0e}`, `{"a":fals}`, `{"model":"\ud83d\ude00"}`,
		`{}`, ` { } x`, `{"a":1}}`, `{"mo\u0064e`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantOpen, wantErr := topLevelMembers(b, new(memberRecorder))
		got, open, err := heldMembers(b, nil)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: heldMembers error %v, jsonScan %v", b, err, wantErr)
		}
		if err != nil {
			return
		}
		if open != wantOpen {
			t.Fatalf("%q: '{' at %d, jsonScan %d", b, open, wantOpen)
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(member{})); diff != "" {
			t.Fatalf("%q (-jsonScan +heldMembers):\n%s", b, diff)
		}
	})
}

// streamPin runs body through a Reader reading chunk bytes at a time
// from a source that returns one byte per read when slow is set.
func streamPin(body []byte, known bool, value []byte, chunk int, slow bool) ([]byte, *Reader, error) {
	var src io.Reader = bytes.NewReader(body)
	if slow {
		src = iotest.OneByteReader(src)
	}
	n := int64(len(body))
	if !known {
		n = -1
	}
	r := NewReader(src, n, value, chunk)
	out, err := io.ReadAll(r)
	return out, r, err
}

func TestPinReader(t *testing.T) {
	served := []byte(`"served"`)
	long := strings.Repeat("x", 100)
	tests := []struct {
		name  string
		value []byte
		give  string
		want  string // before padding
	}{
		{"model last", served, `{"messages":[{"content":"` + long + `"}],"model":"gpt-4o"}`, `{"messages":[{"content":"` + long + `"}],"model":"served"}`},
		{"model first, commas move to the next key", served, `{ "model" : 7 , "n":1}`, `{ "model" : "served"  ,"n":1}`},
		{"no model: added last", served, `{"input":"` + long + `"}`, `{"input":"` + long + `","model":"served"}`},
		{"empty object", served, `{ }`, `{ "model":"served"}`},
		{"duplicates: first kept", served, `{"Model":{"a":[1]},"x":1,"model":"b","mOdEl":null}`, `{"Model":"served","x":1}`},
		{"escaped key", served, `{"mo\u0064\u0065l":"a","m\u006fdelx":2}`, `{"mo\u0064\u0065l":"served","m\u006fdelx":2}`},
		{"nested model untouched", served, `{"x":{"model":"inner"}}`, `{"x":{"model":"inner"},"model":"served"}`},
		{"drop first", nil, `{"model":"a", "n":1}`, `{ "n":1}`},
		{"drop last", nil, `{"n":1, "model":"a"}`, `{"n":1 }`},
		{"drop only", nil, `{ "model":"a" }`, `{  }`},
		{"drop all", nil, `{"model":1,"MODEL":2,"n":3,"Model":4}`, `{"n":3}`},
		{"whitespace only", served, "  \n", "  \n"},
	}
	for _, tt := range tests {
		for _, slow := range []bool{false, true} {
			for _, chunk := range []int{1, 3, 64 << 10} {
				for _, known := range []bool{true, false} {
					name := fmt.Sprintf("%s/slow=%v/chunk=%d/known=%v", tt.name, slow, chunk, known)
					got, r, err := streamPin([]byte(tt.give), known, tt.value, chunk, slow)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					want := tt.want
					if known {
						grow := 0
						if tt.value != nil {
							grow = pinGrowthBytes + len(tt.value)
						}
						want += strings.Repeat(" ", len(tt.give)+grow-len(tt.want))
						if r.Length() != int64(len(want)) {
							t.Errorf("%s: length() = %d, want %d", name, r.Length(), len(want))
						}
					} else if r.Length() != -1 {
						t.Errorf("%s: length() = %d for a source of unknown length", name, r.Length())
					}
					if string(got) != want {
						t.Errorf("%s:\n got %q\nwant %q", name, got, want)
					}
					if r.Failure() != nil {
						t.Errorf("%s: failure() = %v", name, r.Failure())
					}
				}
			}
		}
	}
}

func TestPinReaderRefusesWhatIsNotAnObject(t *testing.T) {
	for _, bad := range []string{`[1,2]`, `{"model":"a"`, `{"model":"a"}}`, `{"a":1} x`, `"model"`, `{"a":` + strings.Repeat("1", 1000) + `x}`} {
		for _, chunk := range []int{1, 7, 4096} {
			got, r, err := streamPin([]byte(bad), true, []byte(`"m"`), chunk, false)
			if !errors.Is(err, ErrNotObject) || !errors.Is(r.Failure(), ErrNotObject) {
				t.Errorf("%q chunk %d: err %v, failure %v; want ErrNotObject", bad, chunk, err, r.Failure())
			}
			// The instance never gets as many bytes as announced: its
			// request stays incomplete.
			if int64(len(got)) >= r.Length() {
				t.Errorf("%q chunk %d: %d bytes passed, %d announced", bad, chunk, len(got), r.Length())
			}
		}
	}
	srcErr := errors.New("peer went away")
	r := NewReader(io.MultiReader(strings.NewReader(`{"a":`), iotest.ErrReader(srcErr)), 100, nil, 16)
	if _, err := io.ReadAll(r); !errors.Is(err, srcErr) || !errors.Is(r.Failure(), srcErr) {
		t.Errorf("source failure: err %v, failure %v", err, r.Failure())
	}
}

// A streamed body pins to the same request a held one does: the same
// members apart from the model, and exactly one model member with the
// pinned value (none when the model is unknown); its length is what
// length() announced. Anything Pin refuses, it refuses too.
func FuzzPinReader(f *testing.F) {
	f.Add([]byte(`{"model":"a","messages":[{"role":"user","content":"x"}]}`), "served", uint8(3), false)
	f.Add([]byte(`{"n":1,"Model":"a","model":2}`), "", uint8(1), true)
	f.Add([]byte(`{"mo\u0064el":"a"}`), "m", uint8(2), false)
	f.Add([]byte(`[1]`), "m", uint8(5), false)
	f.Fuzz(func(t *testing.T, b []byte, model string, chunk uint8, slow bool) {
		if !utf8.ValidString(model) {
			return
		}
		value, err := Value(model, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return // Pin passes blank bodies (Unicode spaces too) as they are
		}
		held, heldErr := Pin(b, model, "")
		got, r, err := streamPin(b, true, value, int(chunk)+1, slow)
		if heldErr != nil {
			if err == nil {
				t.Fatalf("%q: Pin refuses (%v), the stream passed %q", b, heldErr, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: Pin accepts, the stream fails: %v", b, err)
		}
		if int64(len(got)) != r.Length() {
			t.Fatalf("%q: %d bytes, announced %d", b, len(got), r.Length())
		}
		wantRest, _ := membersBut(t, held)
		gotRest, gotModels := membersBut(t, got)
		if diff := cmp.Diff(wantRest, gotRest); diff != "" {
			t.Fatalf("%q: other members differ (-held +streamed):\n%s", b, diff)
		}
		switch {
		case value == nil && len(gotModels) != 0:
			t.Fatalf("%q: model unknown, the stream kept %q", b, gotModels)
		case value != nil && (len(gotModels) != 1 || gotModels[0] != string(value)):
			t.Fatalf("%q: model members %q, want one %s", b, gotModels, value)
		}
	})
}

// membersBut decodes the object b into its non-model members (the last
// of duplicate keys wins, as encoding/json decides) and the values of its
// model members.
func membersBut(t *testing.T, b []byte) (map[string]string, []string) {
	t.Helper()
	members, _, err := refTopLevelMembers(b)
	if err != nil {
		t.Fatalf("%q: not an object: %v", b, err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	rest := map[string]string{}
	for k, v := range keys {
		if !(len(k) == 5 && strings.EqualFold(k, "model")) {
			rest[k] = string(v)
		}
	}
	var models []string
	for _, m := range members {
		if m.model {
			models = append(models, string(b[m.valueStart:m.end]))
		}
	}
	return rest, models
}

func BenchmarkPinReader(b *testing.B) {
	body := []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 1<<20/12) + `"}],"model":"gpt-4o"}`)
	value := []byte(`"served"`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r := NewReader(bytes.NewReader(body), int64(len(body)), value, 64<<10)
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPinModel(b *testing.B) {
	body := []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 1<<20/12) + `"}],"model":"gpt-4o"}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Pin(body, "served", ""); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPinModelKeepsPinnedBody checks that a body naming the instance's
// model already is returned as is, not copied, and that any other "model"
// member still gets it rewritten.
func TestPinModelKeepsPinnedBody(t *testing.T) {
	body := []byte(`{"model":"m","x":1}`)
	got, err := Pin(body, "m", "")
	if err != nil || string(got) != string(body) || &got[0] != &body[0] {
		t.Errorf("Pin(%s) = %s, %v; want the same slice", body, got, err)
	}
	dup := []byte(`{"model":"m","MODEL":"x"}`)
	got, err = Pin(dup, "m", "")
	if err != nil || string(got) != `{"model":"m","MODEL":"m"}` {
		t.Errorf("Pin(%s) = %s, %v", dup, got, err)
	}
}

func TestPinModel(t *testing.T) {
	known := instance{Model: "served", Runtime: "llama.cpp"}
	unknown := instance{Runtime: "openai"}
	mlx := instance{Model: "served", Runtime: "mlx-lm"}
	tests := []struct {
		name  string
		local instance
		give  string
		want  string // "" with wantErr
		err   bool
	}{
		{"replace keeps bytes", known, `{"model": "evil/x" , "messages":[{"a":1.50}]}`, `{"model": "served" , "messages":[{"a":1.50}]}`, false},
		{"insert", known, `{ "input":"x"}`, `{"model":"served", "input":"x"}`, false},
		{"insert empty object", known, `{}`, `{"model":"served"}`, false},
		{"duplicates and case", known, `{"model":"a","Model":"b","x":{"model":"inner"}}`, `{"model":"served","Model":"served","x":{"model":"inner"}}`, false},
		{"escaped key", known, `{"mod\u0065l":"a"}`, `{"mod\u0065l":"served"}`, false},
		{"non-string model", known, `{"model":["a"],"n":1}`, `{"model":"served","n":1}`, false},
		{"mlx default", mlx, `{"model":"any/repo"}`, `{"model":"default_model"}`, false},
		{"unknown drops first", unknown, `{"model":"a", "n":1}`, `{"n":1}`, false},
		{"unknown drops last", unknown, `{"n":1, "model":"a"}`, `{"n":1}`, false},
		{"unknown drops only", unknown, `{ "model":"a" }`, `{  }`, false},
		{"unknown without model", unknown, `{"n": 1}`, `{"n": 1}`, false},
		{"empty", known, ``, ``, false},
		{"array", known, `[1,2]`, ``, true},
		{"not json", known, `{"a":`, ``, true},
		{"string", known, `"model"`, ``, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Pin([]byte(tt.give), tt.local.Model, tt.local.Runtime)
			if tt.err {
				if err == nil {
					t.Fatalf("got %s, want error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzPinModel(f *testing.F) {
	f.Add([]byte(`{"model":"a","messages":[]}`), "served")
	f.Add([]byte(`{"n":1,"model":"a"}`), "")
	f.Add([]byte(`[1]`), "m")
	f.Fuzz(func(t *testing.T, b []byte, model string) {
		if !utf8.ValidString(model) {
			return // the table's models are text; Marshal would replace bad bytes
		}
		out, err := Pin(b, model, "")
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			return
		}
		var v map[string]json.RawMessage
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("output %q of %q is not an object: %v", out, b, err)
		}
		for k, raw := range v {
			if len(k) == 5 && bytes.EqualFold([]byte(k), []byte("model")) {
				var got string
				if model == "" || json.Unmarshal(raw, &got) != nil || got != model {
					t.Fatalf("model member %q=%s in %q (pinned %q)", k, raw, out, model)
				}
			}
		}
	})
}

// instance is the model and runtime a body is pinned for.
type instance struct{ Model, Runtime string }

// FuzzValue: Value is json.Marshal's encoding of the model, whichever
// way it makes it.
func FuzzValue(f *testing.F) {
	for _, s := range []string{"llama3:8b", "a<b>&c", `q"uo\te`, "é", "\x00", "mlx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, model string) {
		got, err := Value(model, "")
		if model == "" {
			if got != nil || err != nil {
				t.Fatalf("Value(\"\") = %q, %v", got, err)
			}
			return
		}
		want, werr := json.Marshal(model)
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Fatalf("Value(%q) = %q, %v; json.Marshal: %q, %v", model, got, err, want, werr)
		}
	})
}

// TestPinAllocations: pinning a chat request of a few members to a model
// of a common name makes its one new body, no more (the value is kept on
// the stack, and so are the members and the nesting stack).
func TestPinAllocations(t *testing.T) {
	body := []byte(`{"model":"any","messages":[{"role":"user","content":"Say hello in one word."}],"max_tokens":8,"stream":false}`)
	var out []byte
	n := testing.AllocsPerRun(200, func() {
		var err error
		if out, err = Pin(body, "bench-model", "llama.cpp"); err != nil {
			t.Fatal(err)
		}
	})
	if want := `{"model":"bench-model","messages"`; !strings.HasPrefix(string(out), want) {
		t.Fatalf("pinned: %s", out)
	}
	if n > 1 {
		t.Errorf("Pin allocates %v times, want at most 1", n)
	}
}

// plainRun finds the same end of a plain run as a byte-by-byte loop, for
// specials at every offset of a long run (past its windows' edges) and
// for runs that reach the chunk's end.
func TestPlainRunMatchesByteLoop(t *testing.T) {
	ref := func(b []byte, j int) int {
		for j < len(b) && strPlain[b[j]] {
			j++
		}
		return j
	}
	plain := bytes.Repeat([]byte("lorem ipsum "), 1200)
	for _, special := range []byte{'"', '\\', 0x00, 0x1f, '\n'} {
		for at := 0; at < len(plain); at += 1 + at/7 {
			b := slices.Clone(plain)
			b[at] = special
			for _, j := range []int{0, 1, 31, 32, 33, at} {
				if j > at {
					continue
				}
				if got, want := plainRun(b, j), ref(b, j); got != want {
					t.Fatalf("special %#x at %d, from %d: %d, want %d", special, at, j, got, want)
				}
			}
		}
	}
	for _, n := range []int{0, 1, 63, 64, 65, 191, 192, 5000} {
		if got := plainRun(plain[:n], 0); got != n {
			t.Fatalf("plain run of %d: %d", n, got)
		}
	}
	// Bytes at and above 0x80 stand for themselves.
	if got := plainRun(bytes.Repeat([]byte{0xff, 0x80, 0x7f, 0x20}, 100), 0); got != 400 {
		t.Fatalf("high bytes: %d, want 400", got)
	}
}

// BenchmarkPinChat pins the small chat request a mesh hop carries: the
// per-request cost of scanning a held body for its "model".
func BenchmarkPinChat(b *testing.B) {
	body := []byte(`{"model":"any","messages":[{"role":"user","content":"Say hello in one word."}],"max_tokens":8,"stream":false}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Pin(body, "bench-model", "llama.cpp"); err != nil {
			b.Fatal(err)
		}
	}
}
