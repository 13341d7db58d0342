package pkg

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeld/nodeld/internal/grammar"
)

func names(ns ...string) grammar.Value {
	var vs []grammar.Value
	for _, n := range ns {
		vs = append(vs, grammar.StringValue(n))
	}
	return grammar.ListValue(vs...)
}

// req is a requirement with the defaults EffectiveRequirements fills in.
func req(sel string, preds ...Predicate) Requirement {
	return Requirement{Select: sel, Predicates: preds, Count: 1, MinProvenance: grammar.ProvenanceClaimed}
}

func TestEffectiveRequirements(t *testing.T) {
	gpu24 := Requirement{Select: "accel.gpu.nvidia", Count: 2, Exclusive: true, MinProvenance: grammar.ProvenanceProbed,
		Predicates: []Predicate{{Attr: "mem_bytes", Op: grammar.OpGte, Value: grammar.IntValue(24 << 30)}}}
	tests := []struct {
		name string
		give Variant
		want []Requirement
	}{
		{name: "nothing required", give: Variant{Name: "any"}},
		{
			name: "one architecture and one os: exact selectors",
			give: Variant{Requires: Requires{Arch: []string{"arm64"}, OS: []string{"darwin"}}},
			want: []Requirement{req("cpu.arch.arm64"), req("os.darwin")},
		},
		{
			name: "several: one of them by name",
			give: Variant{Requires: Requires{Arch: []string{"amd64", "arm64"}, OS: []string{"linux", "darwin"}}},
			want: []Requirement{
				req("cpu.arch", Predicate{Attr: "name", Op: "in", Value: names("amd64", "arm64")}),
				req("os", Predicate{Attr: "name", Op: "in", Value: names("linux", "darwin")}),
			},
		},
		{
			name: "a name that is no capability word is still one of a list",
			give: Variant{Requires: Requires{Arch: []string{strings.Repeat("a", 64) + "." + strings.Repeat("b", 63)}}},
			want: []Requirement{req("cpu.arch", Predicate{Attr: "name", Op: "in", Value: names(strings.Repeat("a", 64) + "." + strings.Repeat("b", 63))})},
		},
		{
			name: "gpu",
			give: Variant{Requires: Requires{GPU: true}},
			want: []Requirement{req("accel.gpu")},
		},
		{
			name: "runtimes spelled as capability words",
			give: Variant{Requires: Requires{Runtimes: []string{"llama.cpp", "mlx-lm", "ollama", "openai", "process", "vllm"}}},
			want: []Requirement{req("runtime.llamacpp"), req("runtime.mlxlm"), req("runtime.ollama"), req("runtime.openai"), req("runtime.process"), req("runtime.vllm")},
		},
		{
			name: "declared after requires, defaults filled, explicit values kept",
			give: Variant{
				Requires: Requires{OS: []string{"linux"}, GPU: true},
				Requirements: []Requirement{
					{Select: "label.rack", Predicates: []Predicate{{Attr: "value", Op: "eq", Value: grammar.StringValue("a")}}},
					gpu24,
				},
			},
			want: []Requirement{
				req("os.linux"), req("accel.gpu"),
				req("label.rack", Predicate{Attr: "value", Op: "eq", Value: grammar.StringValue("a")}),
				gpu24,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			declared := append([]Requirement(nil), tt.give.Requirements...)
			got := tt.give.EffectiveRequirements()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("EffectiveRequirements (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(declared, tt.give.Requirements); diff != "" {
				t.Errorf("the variant's requirements changed")
			}
			m := testManifest()
			m.Variants = []Variant{tt.give}
			m.Variants[0].Name = "v"
			for i, r := range got {
				var errs []string
				r.validate("r", func(f string, a ...any) { errs = append(errs, f) })
				if len(errs) > 0 {
					t.Errorf("requirement %d (%+v) is invalid: %v", i, r, errs)
				}
			}
		})
	}
}

func TestCommonRequirementsAndExecution(t *testing.T) {
	for rt, want := range map[string]string{"process": "runtime.process", "llama.cpp": "runtime.llamacpp", "ollama": "runtime.ollama", "mlx-lm": "runtime.mlxlm"} {
		m := Manifest{Runtime: Runtime{Type: rt}}
		if diff := cmp.Diff([]Requirement{req(want)}, m.CommonRequirements()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", rt, diff)
		}
	}
	if got := (Variant{}).EffectiveExecution(); got != grammar.ExecutionNative {
		t.Errorf("default execution %q", got)
	}
	if got := (Variant{Execution: "emulated"}).EffectiveExecution(); got != grammar.ExecutionEmulated {
		t.Errorf("emulated execution %q", got)
	}
}

// fullManifestJSON uses every field the requirement grammar added.
const fullManifestJSON = `{
  "schema": 1, "id": "qwen-7b", "version": "1.0.0", "kind": "inference", "role": "chat",
  "runtime": {"type": "llama.cpp", "model_file": "model.gguf"},
  "labels": ["gpu-heavy", "tenant.a"],
  "excludes": ["batch"],
  "perf_target": {"id": "perf.infer.chat", "param": "metric", "param_value": "ttfb_ms", "better": "lower", "budget": 500},
  "sticky": true,
  "variants": [
    {
      "name": "cuda",
      "requires": {"os": ["linux"]},
      "requirements": [
        {"select": "accel.gpu.nvidia", "predicates": [{"attr": "mem_bytes", "op": "gte", "value": 25769803776}], "count": 1, "exclusive": true, "min_provenance": "probed"},
        {"select": "label.zone", "predicates": [{"attr": "value", "op": "in", "value": ["eu-1", "eu-2"]}]}
      ],
      "resources": {"mem_bytes": 2147483648, "vram_bytes": 8589934592}
    },
    {
      "name": "x86-on-arm",
      "execution": "emulated",
      "requirements": [{"select": "cpu.arch.arm64"}],
      "resources": {"mem_bytes": 10737418240}
    }
  ],
  "files": [{"path": "model.gguf", "size": 3, "sha256": "` + "0000000000000000000000000000000000000000000000000000000000000000" + `"}]
}`

func TestParseManifestRequirements(t *testing.T) {
	m, err := ParseManifest([]byte(fullManifestJSON))
	if err != nil {
		t.Fatalf("ParseManifest: %v", err)
	}
	budget := 500.0
	want := &PerfTarget{ID: "perf.infer.chat", Param: "metric", ParamValue: grammar.StringValue("ttfb_ms"), Better: "lower", Budget: &budget}
	if diff := cmp.Diff(want, m.PerfTarget); diff != "" {
		t.Errorf("perf target (-want +got):\n%s", diff)
	}
	if !m.Sticky || len(m.Labels) != 2 || len(m.Excludes) != 1 {
		t.Errorf("labels %v excludes %v sticky %v", m.Labels, m.Excludes, m.Sticky)
	}
	wantCuda := []Requirement{
		req("os.linux"),
		{Select: "accel.gpu.nvidia", Count: 1, Exclusive: true, MinProvenance: "probed",
			Predicates: []Predicate{{Attr: "mem_bytes", Op: "gte", Value: grammar.IntValue(24 << 30)}}},
		req("label.zone", Predicate{Attr: "value", Op: "in", Value: names("eu-1", "eu-2")}),
	}
	if diff := cmp.Diff(wantCuda, m.Variants[0].EffectiveRequirements()); diff != "" {
		t.Errorf("cuda requirements (-want +got):\n%s", diff)
	}
	if m.Variants[1].EffectiveExecution() != grammar.ExecutionEmulated || m.Variants[0].EffectiveExecution() != grammar.ExecutionNative {
		t.Error("execution")
	}
	if r := m.Variants[0].Resources; r.MemBytes != 2<<30 || r.VRAMBytes != 8<<30 {
		t.Errorf("resources %+v", r)
	}

	// What ParseManifest accepts survives a JSON round trip.
	enc, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseManifest(enc)
	if err != nil {
		t.Fatalf("re-parse: %v", err)
	}
	if diff := cmp.Diff(m, back); diff != "" {
		t.Errorf("round trip (-first +second):\n%s", diff)
	}
}

func TestParseManifestRequirementsRefuses(t *testing.T) {
	variant := func(m map[string]any) map[string]any { return m["variants"].([]any)[0].(map[string]any) }
	setReqs := func(reqs ...any) func(m map[string]any) {
		return func(m map[string]any) { variant(m)["requirements"] = reqs }
	}
	pred := func(attr, op string, v any) map[string]any { return map[string]any{"attr": attr, "op": op, "value": v} }
	withPreds := func(preds ...any) map[string]any { return map[string]any{"select": "accel.gpu", "predicates": preds} }
	perf := func(edit func(p map[string]any)) func(m map[string]any) {
		return func(m map[string]any) {
			p := map[string]any{"id": "perf.infer.chat", "param": "metric", "param_value": "ttfb_ms", "better": "lower"}
			edit(p)
			m["perf_target"] = p
		}
	}
	many := func(n int, v any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	tests := []struct {
		name   string
		edit   func(m map[string]any)
		wantIn string
	}{
		{name: "bad selector", edit: setReqs(map[string]any{"select": "Accel.GPU"}), wantIn: "requirements[0].select"},
		{name: "empty selector", edit: setReqs(map[string]any{"select": ""}), wantIn: "select"},
		{name: "trust selector", edit: setReqs(map[string]any{"select": "trust"}), wantIn: "trust is assigned by operators"},
		{name: "trust selector under", edit: setReqs(map[string]any{"select": "trust.pinned"}), wantIn: "trust is assigned by operators"},
		{name: "count too high", edit: setReqs(map[string]any{"select": "accel", "count": MaxRequirementCount + 1}), wantIn: "count"},
		{name: "negative count", edit: setReqs(map[string]any{"select": "accel", "count": -1}), wantIn: "count"},
		{name: "unknown provenance", edit: setReqs(map[string]any{"select": "accel", "min_provenance": "rumoured"}), wantIn: "min_provenance"},
		{name: "unknown requirement field", edit: setReqs(map[string]any{"select": "accel", "or": "cpu"}), wantIn: "unknown field"},
		{name: "too many requirements", edit: setReqs(many(MaxRequirements+1, map[string]any{"select": "accel"})...), wantIn: "limit"},
		{name: "too many predicates", edit: setReqs(withPreds(many(MaxPredicates+1, pred("a", "eq", 1))...)), wantIn: "limit"},
		{name: "bad attribute", edit: setReqs(withPreds(pred("Mem", "eq", 1))), wantIn: "attr"},
		{name: "unknown operator", edit: setReqs(withPreds(pred("a", "ne", 1))), wantIn: "op"},
		{name: "gte a string", edit: setReqs(withPreds(pred("a", "gte", "big"))), wantIn: "does not fit gte"},
		{name: "in a scalar", edit: setReqs(withPreds(pred("a", "in", "x"))), wantIn: "does not fit in"},
		{name: "in nothing", edit: setReqs(withPreds(pred("a", "in", []any{}))), wantIn: "does not fit in"},
		{name: "eq a list", edit: setReqs(withPreds(pred("a", "eq", []any{1}))), wantIn: "does not fit eq"},
		{name: "has a list", edit: setReqs(withPreds(pred("a", "has", []any{1}))), wantIn: "does not fit has"},
		{name: "no value", edit: setReqs(withPreds(map[string]any{"attr": "a", "op": "eq"})), wantIn: "does not fit eq"},
		{name: "null value", edit: setReqs(withPreds(pred("a", "eq", nil))), wantIn: "invalid value"},
		{name: "object value", edit: setReqs(withPreds(pred("a", "eq", map[string]any{}))), wantIn: "invalid value"},
		{name: "nested list", edit: setReqs(withPreds(pred("a", "in", []any{[]any{1}}))), wantIn: "invalid value"},
		{name: "long string", edit: setReqs(withPreds(pred("a", "eq", strings.Repeat("x", grammar.MaxValueStringLen+1)))), wantIn: "invalid value"},
		{name: "long list", edit: setReqs(withPreds(pred("a", "in", many(grammar.MaxValueListLen+1, 1)))), wantIn: "invalid value"},
		{name: "huge integer", edit: setReqs(withPreds(pred("a", "gte", json.Number("1e400")))), wantIn: "decode manifest"},
		{name: "bad execution", edit: func(m map[string]any) { variant(m)["execution"] = "translated" }, wantIn: "execution"},
		{name: "bad label", edit: func(m map[string]any) { m["labels"] = []any{"GPU"} }, wantIn: "labels"},
		{name: "duplicate label", edit: func(m map[string]any) { m["labels"] = []any{"a", "a"} }, wantIn: "duplicate"},
		{name: "too many excludes", edit: func(m map[string]any) { m["excludes"] = many(MaxPackageLabels+1, "a") }, wantIn: "excludes"},
		{name: "perf id", edit: perf(func(p map[string]any) { p["id"] = "perf" }), wantIn: "perf_target.id"},
		{name: "perf id trust", edit: perf(func(p map[string]any) { p["id"] = "trust.x" }), wantIn: "perf_target.id"},
		{name: "perf param", edit: perf(func(p map[string]any) { p["param"] = "" }), wantIn: "perf_target.param"},
		{name: "perf param value list", edit: perf(func(p map[string]any) { p["param_value"] = []any{"a"} }), wantIn: "perf_target.param_value"},
		{name: "perf param value missing", edit: perf(func(p map[string]any) { delete(p, "param_value") }), wantIn: "perf_target.param_value"},
		{name: "perf better", edit: perf(func(p map[string]any) { p["better"] = "faster" }), wantIn: "perf_target.better"},
		{name: "perf negative budget", edit: perf(func(p map[string]any) { p["budget"] = -1 }), wantIn: "perf_target.budget"},
		{name: "perf unknown field", edit: perf(func(p map[string]any) { p["weight"] = 2 }), wantIn: "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validManifestJSON(t)
			tt.edit(m)
			data, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseManifest(data)
			if ErrorCode(err) != CodeBadManifest {
				t.Fatalf("code %q, want %q (err %v)", ErrorCode(err), CodeBadManifest, err)
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("error %q does not contain %q", err, tt.wantIn)
			}
		})
	}
	// A NaN budget cannot be written in JSON; Validate still refuses one
	// built in code.
	m := testManifest()
	m.Schema = SchemaVersion
	nan := math.NaN()
	m.PerfTarget = &PerfTarget{ID: "perf.infer.chat", Param: "metric", ParamValue: grammar.StringValue("ttfb_ms"), Better: "lower", Budget: &nan}
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "budget") {
		t.Errorf("NaN budget: %v", err)
	}
}

// TestManifestsBeforeRequirements pins that packages written before the
// requirement grammar keep their bytes and their meaning: a manifest
// without the new fields encodes exactly as it did (so Build writes the
// same bytes and their signatures hold), and the shipped example reads as
// the equivalent requirements.
func TestManifestsBeforeRequirements(t *testing.T) {
	m := testManifest()
	m.Schema = SchemaVersion
	enc, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"requirements", "execution", "labels", "excludes", "perf_target", "sticky"} {
		if strings.Contains(string(enc), `"`+key+`"`) {
			t.Errorf("an old manifest now encodes %q: %s", key, enc)
		}
	}

	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "packages", "echo-llm", "manifest.template.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The template lists its files when it is built; list the command.
	var tmpl map[string]any
	if err := json.Unmarshal(data, &tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl["files"] = []any{map[string]any{"path": "echo-llm", "size": 1, "sha256": strings.Repeat("0", 64), "exec": true}}
	if data, err = json.Marshal(tmpl); err != nil {
		t.Fatal(err)
	}
	ex, err := ParseManifest(data)
	if err != nil {
		t.Fatalf("the example manifest no longer parses: %v", err)
	}
	if diff := cmp.Diff([]Requirement{req("os.linux"), req("runtime.process")}, ex.Variants[0].EffectiveRequirements()); diff != "" {
		t.Errorf("example requirements (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Requirement{req("runtime.process")}, ex.CommonRequirements()); diff != "" {
		t.Errorf("example common requirements (-want +got):\n%s", diff)
	}

	// And a package signed with the old fields still verifies.
	key := testKey(t)
	if _, err := VerifyDir(makePackage(t, key), Anchors{pubOf(key)}, nil); err != nil {
		t.Fatalf("VerifyDir: %v", err)
	}
}

// FuzzManifestRequirements decodes manifests whose first variant has
// arbitrary requirements and whose perf target is arbitrary: whatever
// parses validates, reads as requirements that each fit the grammar, and
// survives a JSON round trip.
func FuzzManifestRequirements(f *testing.F) {
	f.Add(`[{"select":"accel.gpu.nvidia","predicates":[{"attr":"mem_bytes","op":"gte","value":25769803776}],"count":2,"exclusive":true,"min_provenance":"probed"}]`,
		`{"id":"perf.infer.chat","param":"metric","param_value":"ttfb_ms","better":"lower","budget":500}`)
	f.Add(`[{"select":"label.zone","predicates":[{"attr":"value","op":"in","value":["a",1,2.5,true]}]}]`, ``)
	f.Add(`[{"select":"trust"}]`, `{"id":"trust.x"}`)
	f.Add(`[{"select":"a","predicates":[{"attr":"a","op":"in","value":[[1]]}]}]`, `null`)
	f.Add(`null`, `{"id":"a.b","param":"p","param_value":1e999,"better":"higher"}`)
	head := `{"schema":1,"id":"p","version":"1","kind":"service","runtime":{"type":"ollama","model":"m"},"variants":[{"name":"v","requirements":`
	f.Fuzz(func(t *testing.T, reqs, perf string) {
		doc := head + reqs + `}]`
		if perf != "" {
			doc += `,"perf_target":` + perf
		}
		doc += `,"files":[]}`
		m, err := ParseManifest([]byte(doc))
		if err != nil {
			if !knownCodes[ErrorCode(err)] {
				t.Fatalf("error without a known code: %v", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed manifest does not validate: %v", err)
		}
		for _, v := range m.Variants {
			for _, r := range append(v.EffectiveRequirements(), m.CommonRequirements()...) {
				if !grammar.ValidCapabilityID(r.Select) || grammar.CapabilityFamily(r.Select) == grammar.TrustFamily {
					t.Fatalf("selector %q", r.Select)
				}
				if r.Count < 1 || r.Count > MaxRequirementCount {
					t.Fatalf("count %d", r.Count)
				}
				if _, ok := grammar.ProvenanceRank(r.MinProvenance); !ok {
					t.Fatalf("min provenance %q", r.MinProvenance)
				}
				for _, p := range r.Predicates {
					if !grammar.ValidAttrName(p.Attr) || !grammar.ValidPredicateOperand(p.Op, p.Value) {
						t.Fatalf("predicate %+v", p)
					}
				}
			}
		}
		enc, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := ParseManifest(enc)
		if err != nil {
			t.Fatalf("re-parse %s: %v", enc, err)
		}
		// An empty list and an omitted one mean the same.
		if diff := cmp.Diff(m, back, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
