package facts

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/identity"
)

// attrs builds an attribute map from name, value pairs.
func attrs(kv ...any) map[string]grammar.Value {
	m := map[string]grammar.Value{}
	for i := 0; i < len(kv); i += 2 {
		var v grammar.Value
		switch x := kv[i+1].(type) {
		case int:
			v = grammar.IntValue(int64(x))
		case uint64:
			v = grammar.IntValue(int64(x))
		case float64:
			v = grammar.FloatValue(x)
		case string:
			v = grammar.StringValue(x)
		case bool:
			v = grammar.BoolValue(x)
		default:
			panic(fmt.Sprintf("attrs: %T", x))
		}
		m[kv[i].(string)] = v
	}
	return m
}

func nodeIDOf(k ed25519.PrivateKey) string { return identity.NodeID(pubOf(k)) }

func rec(id, provenance, state string, a map[string]grammar.Value) Capability {
	return Capability{ID: id, Attrs: a, Provenance: provenance, State: state}
}

func probedRec(id string, a map[string]grammar.Value) Capability {
	return rec(id, grammar.ProvenanceProbed, grammar.StateAvailable, a)
}

func TestProbeCapabilities(t *testing.T) {
	const mib = 1 << 20
	arch := probedRec("cpu.arch.amd64", attrs("name", "amd64"))
	cores := probedRec("cpu.cores", attrs("count", 16))
	linux := probedRec("os.linux", attrs("name", "linux", "kernel", "6.8.0-45-generic"))
	mem := probedRec("mem.system", attrs("total", uint64(24684092*1024), "free", uint64(24254004*1024)))
	process := probedRec("runtime.process", attrs("name", "process"))
	tests := []struct {
		name   string
		setup  func(m *fakeMachine)
		labels map[string]string
		want   []Capability
	}{
		{name: "bare linux", want: []Capability{arch, cores, linux, mem, process}},
		{
			name: "gpus: one idle, one busy",
			setup: func(m *fakeMachine) {
				m.onPath["nvidia-smi"] = true
				m.smiOut = realNvidiaSMI
			},
			want: []Capability{arch, cores, linux, mem,
				probedRec("accel.gpu.nvidia.geforce-rtx-4090", attrs("index", 0, "name", "NVIDIA GeForce RTX 4090", "mem_bytes", 24564*mib, "utilization_pct", 3)),
				probedRec("mem.vram", attrs("index", 0, "total", 24564*mib, "free", 23987*mib)),
				rec("accel.gpu.nvidia.a100-sxm4-80gb", grammar.ProvenanceProbed, grammar.StateBusy,
					attrs("index", 1, "name", "NVIDIA A100-SXM4-80GB", "mem_bytes", 81920*mib, "utilization_pct", 97)),
				probedRec("mem.vram", attrs("index", 1, "total", 81920*mib, "free", 1024*mib)),
				process},
		},
		{
			name: "gpu without utilisation or name",
			setup: func(m *fakeMachine) {
				m.onPath["nvidia-smi"] = true
				m.smiOut = "3, [N/A], [N/A], 100, 50, [N/A]\n"
			},
			want: []Capability{arch, cores, linux, mem,
				probedRec("accel.gpu.nvidia", attrs("index", 3, "mem_bytes", 100*mib)),
				probedRec("mem.vram", attrs("index", 3, "total", 100*mib, "free", 50*mib)),
				process},
		},
		{
			name: "runtimes with versions when cheap",
			setup: func(m *fakeMachine) {
				m.onPath["llama-server"] = true
				m.onPath["ollama"] = true
				m.onPath["mlx_lm.server"] = true
				m.outputs = map[string]string{
					"/usr/bin/llama-server --version": "version: 4567 (3d1f2a9b)\nbuilt with cc (GCC) 13.2.0 for x86_64-linux-gnu\n",
					"/usr/bin/ollama --version":       "Warning: could not connect to a running Ollama instance\nWarning: client version is 0.5.7\n",
				}
			},
			want: []Capability{arch, cores, linux, mem,
				probedRec("runtime.llamacpp", attrs("name", "llama.cpp", "version", "4567")),
				probedRec("runtime.mlxlm", attrs("name", "mlx-lm")),
				probedRec("runtime.ollama", attrs("name", "ollama", "version", "0.5.7")),
				process},
		},
		{
			name:  "a runtime that will not say its version",
			setup: func(m *fakeMachine) { m.onPath["ollama"] = true },
			want:  []Capability{arch, cores, linux, mem, probedRec("runtime.ollama", attrs("name", "ollama")), process},
		},
		{
			name:   "labels are claimed",
			labels: map[string]string{"zone": "eu-1", "rack": "a"},
			want: []Capability{arch, cores, linux, mem, process,
				rec("label.rack", grammar.ProvenanceClaimed, grammar.StateAvailable, attrs("value", "a")),
				rec("label.zone", grammar.ProvenanceClaimed, grammar.StateAvailable, attrs("value", "eu-1"))},
		},
		{
			name:  "no memory, no memory record",
			setup: func(m *fakeMachine) { m.files = nil },
			want:  []Capability{arch, cores, probedRec("os.linux", attrs("name", "linux")), process},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := linuxMachine()
			if tt.setup != nil {
				tt.setup(m)
			}
			got, err := Probe(context.Background(), m.deps(), tt.labels)
			if err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if diff := cmp.Diff(tt.want, got.Capabilities); diff != "" {
				t.Errorf("capabilities (-want +got):\n%s", diff)
			}
			got.NodeID = "n-0"
			if err := got.Validate(); err != nil {
				t.Errorf("probed facts do not validate: %v", err)
			}
		})
	}
}

func TestProbeCapabilitiesAppleSilicon(t *testing.T) {
	const avail = (3000 + 100000) * 16384
	_, d := macMachine(t, "arm64")
	got, err := Probe(context.Background(), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Capability{
		probedRec("cpu.arch.arm64", attrs("name", "arm64")),
		probedRec("cpu.cores", attrs("count", 16)),
		probedRec("os.darwin", attrs("name", "darwin")),
		// One pool: no mem.system and no mem.vram.
		probedRec("mem.unified", attrs("total", 32<<30, "free", avail)),
		probedRec("accel.gpu.apple.m2-max", attrs("index", 0, "name", "Apple M2 Max", "mem_bytes", 32<<30)),
		probedRec("runtime.process", attrs("name", "process")),
	}
	if diff := cmp.Diff(want, got.Capabilities); diff != "" {
		t.Errorf("capabilities (-want +got):\n%s", diff)
	}

	// An Intel Mac has separate pools.
	_, d = macMachine(t, "amd64")
	got, err = Probe(context.Background(), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Capabilities {
		if c.ID == grammar.CapMemUnified || strings.HasPrefix(c.ID, "accel.") {
			t.Errorf("Intel Mac has %s", c.ID)
		}
	}
}

func TestRuntimeVersionsAreCachedBySource(t *testing.T) {
	m := linuxMachine()
	m.onPath["ollama"] = true
	m.outputs = map[string]string{"/usr/bin/ollama --version": "ollama version is 0.5.7\n"}
	clock := &fakeClock{now: t0}
	src := newTestSource(t, m.deps(), clock)
	const key = "/usr/bin/ollama --version"
	for i, step := range []time.Duration{0, time.Minute, RuntimeVersionMaxAge} {
		clock.Set(clock.Now().Add(step))
		f, err := src.Facts(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := findCap(f, "runtime.ollama").Attr(grammar.AttrVersion); !v.Equal(grammar.StringValue("0.5.7")) {
			t.Errorf("probe %d: version %+v", i, v)
		}
		// Asked on the first probe and again once the version is
		// RuntimeVersionMaxAge old, though every probe here reprobes.
		if want := []int{1, 1, 2}[i]; m.runs[key] != want {
			t.Errorf("probe %d: ollama asked %d times, want %d", i, m.runs[key], want)
		}
	}
}

func findCap(f Facts, id string) Capability {
	for _, c := range f.Capabilities {
		if c.ID == id {
			return c
		}
	}
	return Capability{}
}

func TestModelWord(t *testing.T) {
	long := strings.Repeat("x", MaxModelWordBytes+10)
	tests := []struct{ vendor, give, want string }{
		{"nvidia", "NVIDIA GeForce RTX 4090", "geforce-rtx-4090"},
		{"nvidia", "NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"},
		{"nvidia", "NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"},
		{"nvidia", "Tesla T4", "tesla-t4"},
		{"nvidia", "  Quadro_RTX  8000 (rev. 2)  ", "quadro-rtx-8000-rev-2"},
		{"apple", "Apple M2 Max", "m2-max"},
		{"nvidia", "NVIDIA", ""},
		{"nvidia", "", ""},
		{"nvidia", "日本語", ""},
		{"nvidia", long, long[:MaxModelWordBytes]},
		{"nvidia", strings.Repeat("a", MaxModelWordBytes-1) + " b", strings.Repeat("a", MaxModelWordBytes-1)},
	}
	for _, tt := range tests {
		got := modelWord(tt.vendor, tt.give)
		if got != tt.want {
			t.Errorf("modelWord(%q, %q) = %q, want %q", tt.vendor, tt.give, got, tt.want)
		}
		if got != "" && !grammar.ValidCapabilitySegment(got) {
			t.Errorf("modelWord(%q) = %q is not a capability word", tt.give, got)
		}
	}
}

func TestLoad(t *testing.T) {
	c := func(state string) Capability { return rec("cpu.cores", grammar.ProvenanceProbed, state, nil) }
	tests := []struct {
		name   string
		caps   []Capability
		want   float64
		wantOK bool
	}{
		{name: "no capabilities: unknown"},
		{name: "idle", caps: []Capability{c("available"), c("available")}, want: 0, wantOK: true},
		{name: "one busy of four", caps: []Capability{c("busy"), c("available"), c("degraded"), c("available")}, want: 0.25, wantOK: true},
		{name: "busy and reserved count", caps: []Capability{c("busy"), c("reserved")}, want: 1, wantOK: true},
	}
	for _, tt := range tests {
		f := Facts{Capabilities: tt.caps}
		got, ok := f.Load()
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: Load() = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestValidateCapabilities(t *testing.T) {
	good := rec("label.rack", grammar.ProvenanceClaimed, grammar.StateAvailable, attrs("value", "a"))
	many := make(map[string]grammar.Value)
	for i := range grammar.MaxCapabilityAttrs + 1 {
		many[fmt.Sprintf("a%d", i)] = grammar.IntValue(1)
	}
	tests := []struct {
		name string
		give []Capability
		ok   bool
	}{
		{name: "good", give: []Capability{good, good}, ok: true},
		{name: "trust family", give: []Capability{rec("trust.tier", "claimed", "available", nil)}},
		{name: "one word", give: []Capability{rec("cpu", "probed", "available", nil)}},
		{name: "upper case", give: []Capability{rec("CPU.cores", "probed", "available", nil)}},
		{name: "nine words", give: []Capability{rec("a.b.c.d.e.f.g.h.i", "probed", "available", nil)}},
		{name: "no provenance", give: []Capability{rec("cpu.cores", "", "available", nil)}},
		{name: "unknown provenance", give: []Capability{rec("cpu.cores", "rumoured", "available", nil)}},
		{name: "no state", give: []Capability{rec("cpu.cores", "probed", "", nil)}},
		{name: "unknown state", give: []Capability{rec("cpu.cores", "probed", "idle", nil)}},
		{name: "bad attribute name", give: []Capability{rec("cpu.cores", "probed", "available", attrs("Count", 1))}},
		{name: "too many attributes", give: []Capability{rec("cpu.cores", "probed", "available", many)}},
		{name: "invalid value", give: []Capability{rec("cpu.cores", "probed", "available", map[string]grammar.Value{"x": grammar.FloatValue(math.NaN())})}},
		{name: "zero value", give: []Capability{rec("cpu.cores", "probed", "available", map[string]grammar.Value{"x": {}})}},
		{name: "too many records", give: make([]Capability, MaxCapabilities+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Facts{NodeID: "n-0", OS: "linux", Arch: "amd64", Capabilities: tt.give}
			err := f.Validate()
			if tt.ok != (err == nil) {
				t.Fatalf("Validate = %v, want ok %v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidFacts) {
				t.Errorf("error %v does not wrap ErrInvalidFacts", err)
			}
		})
	}
}

// capsPayload is a signed-facts payload whose capabilities are caps (raw
// JSON).
func capsPayload(caps string) string {
	return `{"facts":{"node_id":"` + nodeIDOf(testKey(1)) + `","os":"linux","arch":"amd64","cpus":1,"mem_total_bytes":0,"mem_free_bytes":0,` +
		`"runtimes":["process"],"capabilities":` + caps + `},"seq":1,"issued_at":"2025-03-01T12:00:00Z","ttl_seconds":60}`
}

func TestVerifyCapabilities(t *testing.T) {
	record := func(i int) string { return fmt.Sprintf(`{"id":"label.k%d","provenance":"claimed"}`, i) }
	list := func(n int) string {
		var parts []string
		for i := range n {
			parts = append(parts, record(i))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	manyAttrs := func(n int) string {
		var parts []string
		for i := range n {
			parts = append(parts, fmt.Sprintf(`"a%d":%d`, i, i))
		}
		return `[{"id":"cpu.cores","provenance":"probed","attrs":{` + strings.Join(parts, ",") + `}}]`
	}
	tests := []struct {
		name string
		caps string
		want []Capability // nil with ok false: refused
		ok   bool
	}{
		{
			name: "state defaults to available",
			caps: `[{"id":"cpu.cores","attrs":{"count":16},"provenance":"probed"}]`,
			want: []Capability{probedRec("cpu.cores", attrs("count", 16))},
			ok:   true,
		},
		{
			name: "every field and value kind",
			caps: `[{"id":"accel.gpu.nvidia","attrs":{"i":-3,"f":2.5,"s":"x","b":true,"l":[1,"a",false,0.5]},"provenance":"measured","state":"busy","exclusive":true}]`,
			want: []Capability{{ID: "accel.gpu.nvidia", Provenance: "measured", State: "busy", Exclusive: true,
				Attrs: map[string]grammar.Value{"i": grammar.IntValue(-3), "f": grammar.FloatValue(2.5), "s": grammar.StringValue("x"), "b": grammar.BoolValue(true),
					"l": grammar.ListValue(grammar.IntValue(1), grammar.StringValue("a"), grammar.BoolValue(false), grammar.FloatValue(0.5))}}},
			ok: true,
		},
		{name: "null is none", caps: `null`, ok: true},
		{name: "empty list", caps: `[]`, want: nil, ok: true},
		{name: "the most records", caps: list(MaxCapabilities), ok: true},
		{name: "one record too many", caps: list(MaxCapabilities + 1)},
		{name: "the most attributes", caps: manyAttrs(grammar.MaxCapabilityAttrs), ok: true},
		{name: "one attribute too many", caps: manyAttrs(grammar.MaxCapabilityAttrs + 1)},
		{name: "trust family", caps: `[{"id":"trust.tier","attrs":{"value":"pinned"},"provenance":"claimed"}]`},
		{name: "trust family, measured", caps: `[{"id":"trust.pinned","provenance":"measured"}]`},
		{name: "unknown key", caps: `[{"id":"cpu.cores","provenance":"probed","tier":"pinned"}]`},
		{name: "repeated key", caps: `[{"id":"cpu.cores","id":"trust.tier","provenance":"probed"}]`},
		{name: "repeated attribute", caps: `[{"id":"cpu.cores","provenance":"probed","attrs":{"n":1,"n":2}}]`},
		{name: "bad attribute name", caps: `[{"id":"cpu.cores","provenance":"probed","attrs":{"N":1}}]`},
		{name: "null attribute", caps: `[{"id":"cpu.cores","provenance":"probed","attrs":{"n":null}}]`},
		{name: "object attribute", caps: `[{"id":"cpu.cores","provenance":"probed","attrs":{"n":{}}}]`},
		{name: "nested list", caps: `[{"id":"cpu.cores","provenance":"probed","attrs":{"n":[[1]]}}]`},
		{name: "attrs not an object", caps: `[{"id":"cpu.cores","provenance":"probed","attrs":[]}]`},
		{name: "no provenance", caps: `[{"id":"cpu.cores"}]`},
		{name: "bad state", caps: `[{"id":"cpu.cores","provenance":"probed","state":"idle"}]`},
		{name: "one-word id", caps: `[{"id":"cpu","provenance":"probed"}]`},
		{name: "not a list", caps: `{}`},
		{name: "record not an object", caps: `[1]`},
		{name: "long string", caps: `[{"id":"cpu.cores","provenance":"probed","attrs":{"s":"` + strings.Repeat("a", grammar.MaxValueStringLen+1) + `"}}]`},
	}
	key := testKey(1)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := Verify(signRaw(key, capsPayload(tt.caps)), pubOf(key), t0)
			if !tt.ok {
				if err == nil {
					t.Fatalf("Verify accepted %s", tt.caps)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if tt.want != nil || tt.caps == "null" || tt.caps == "[]" {
				if diff := cmp.Diff(tt.want, got.Capabilities); diff != "" {
					t.Errorf("capabilities (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestOldFactsStillVerify verifies facts signed by nodeld before facts
// carried capabilities (stored as that version signed them, with a
// dotted label key it still allowed): they verify, carry no
// capabilities, and their load is unknown.
func TestOldFactsStillVerify(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "facts-before-capabilities.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s Signed
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	f, meta, err := Verify(s, pubOf(testKey(1)), t0.Add(time.Minute))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if meta.Seq != 42 || len(f.GPUs) != 1 || f.Labels["gpu.vendor"] != "nvidia" || f.Capabilities != nil {
		t.Errorf("old facts read as %+v %+v", f, meta)
	}
	if _, ok := f.Load(); ok {
		t.Error("old facts have a known load")
	}
}

func TestSignedCapabilitiesRoundTrip(t *testing.T) {
	key := testKey(1)
	f := testFacts(t)
	f.Capabilities = append(f.Capabilities, rec("perf.infer.chat", grammar.ProvenanceMeasured, grammar.StateAvailable,
		attrs("metric", "ttfb_ms", "value", 3.0, "samples", 20)))
	s, err := Sign(key, f, 1, t0, DefaultTTL)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := Verify(s, pubOf(key), t0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f.Capabilities, got.Capabilities); diff != "" {
		t.Errorf("capabilities (-signed +verified):\n%s", diff)
	}
	if !strings.Contains(string(s.Payload), `"value":3.0`) {
		t.Errorf("a whole float lost its kind: %s", s.Payload)
	}
}

type fakePerf []InferPerf

func (p fakePerf) InferPerf() []InferPerf { return p }

func TestSourcePerfRecords(t *testing.T) {
	perf := fakePerf{
		{Role: "embed", Metric: grammar.PerfMetricTTFBMillis, Value: 12.34567, Samples: 300},
		{Role: "chat", Metric: grammar.PerfMetricTokensPerSecond, Value: 41.5, Samples: MinPerfSamples},
		{Role: "chat", Metric: grammar.PerfMetricTTFBMillis, Value: 180, Samples: 256},
		{Role: "code", Metric: grammar.PerfMetricTTFBMillis, Value: 1, Samples: MinPerfSamples - 1}, // too few
		{Role: "code", Metric: "latency", Value: 1, Samples: 100},                                   // unknown metric
		{Role: "code", Metric: grammar.PerfMetricTTFBMillis, Value: math.NaN(), Samples: 100},
		{Role: "code", Metric: grammar.PerfMetricTTFBMillis, Value: -1, Samples: 100},
		{Role: "Bad Role", Metric: grammar.PerfMetricTTFBMillis, Value: 1, Samples: 100},
	}
	seq, err := OpenSeqStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(linuxMachine().deps(), testKey(1), map[string]string{"rack": "a"}, seq,
		SourceOptions{Now: (&fakeClock{now: t0}).Now, Perf: perf})
	if err != nil {
		t.Fatal(err)
	}
	s, err := src.Signed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := Verify(s, pubOf(testKey(1)), t0)
	if err != nil {
		t.Fatal(err)
	}
	measured := func(role, metric string, v float64, n int) Capability {
		return rec("perf.infer."+role, grammar.ProvenanceMeasured, grammar.StateAvailable, attrs("metric", metric, "value", v, "samples", n))
	}
	want := []Capability{
		rec("label.rack", grammar.ProvenanceClaimed, grammar.StateAvailable, attrs("value", "a")),
		measured("chat", "tokens_per_s", 41.5, MinPerfSamples),
		measured("chat", "ttfb_ms", 180, 256),
		measured("embed", "ttfb_ms", 12.346, 300),
	}
	n := len(f.Capabilities)
	if n < len(want) {
		t.Fatalf("%d capabilities", n)
	}
	if diff := cmp.Diff(want, f.Capabilities[n-len(want):]); diff != "" {
		t.Errorf("label and perf records (-want +got):\n%s", diff)
	}

	// A label change replaces the label records in place, perf stays.
	if err := src.SetLabels(map[string]string{"zone": "b", "rack": "c"}); err != nil {
		t.Fatal(err)
	}
	f, err = src.Facts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want = append([]Capability{
		rec("label.rack", grammar.ProvenanceClaimed, grammar.StateAvailable, attrs("value", "c")),
		rec("label.zone", grammar.ProvenanceClaimed, grammar.StateAvailable, attrs("value", "b")),
	}, want[1:]...)
	n = len(f.Capabilities)
	if diff := cmp.Diff(want, f.Capabilities[n-len(want):]); diff != "" {
		t.Errorf("after SetLabels (-want +got):\n%s", diff)
	}
	if err := src.SetLabels(nil); err != nil {
		t.Fatal(err)
	}
	f, _ = src.Facts(context.Background())
	for _, c := range f.Capabilities {
		if grammar.CapabilityFamily(c.ID) == grammar.CapLabel {
			t.Errorf("label record %s left after the labels were removed", c.ID)
		}
	}
}

func TestReplaceFamily(t *testing.T) {
	a, l1, l2, p := probedRec("cpu.cores", nil), probedRec("label.a", nil), probedRec("label.b", nil), probedRec("perf.infer.x", nil)
	tests := []struct {
		name       string
		caps, repl []Capability
		want       []Capability
	}{
		{name: "in place", caps: []Capability{a, l1, p}, repl: []Capability{l2, l1}, want: []Capability{a, l2, l1, p}},
		{name: "none before: appended", caps: []Capability{a, p}, repl: []Capability{l1}, want: []Capability{a, p, l1}},
		{name: "removed", caps: []Capability{l1, a, l2}, repl: nil, want: []Capability{a}},
	}
	for _, tt := range tests {
		before := append([]Capability(nil), tt.caps...)
		got := replaceFamily(tt.caps, grammar.CapLabel, tt.repl)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
		if diff := cmp.Diff(before, tt.caps); diff != "" {
			t.Errorf("%s: input modified", tt.name)
		}
	}
}

// FuzzFactsCapabilities signs facts whose capabilities are arbitrary
// JSON, so the fuzzer reaches the record decoder behind the signature:
// whatever verifies keeps every bound and survives a second signing.
func FuzzFactsCapabilities(f *testing.F) {
	f.Add(`[{"id":"cpu.cores","attrs":{"count":16},"provenance":"probed"}]`)
	f.Add(`[{"id":"accel.gpu.nvidia","attrs":{"l":[1,"a",false,0.5],"f":1e3},"provenance":"measured","state":"busy","exclusive":true}]`)
	f.Add(`[{"id":"trust.tier","provenance":"claimed"}]`)
	f.Add(`[{"id":"a.b","provenance":"probed","attrs":{"n":1,"n":2}}]`)
	f.Add(`[{"id":"a.b","provenance":"probed","attrs":{"n":[[1]]}}]`)
	f.Add(`null`)
	key := testKey(1)
	f.Fuzz(func(t *testing.T, caps string) {
		got, _, err := Verify(signRaw(key, capsPayload(caps)), pubOf(key), t0)
		if err != nil {
			return
		}
		if len(got.Capabilities) > MaxCapabilities {
			t.Fatalf("%d capabilities accepted", len(got.Capabilities))
		}
		for _, c := range got.Capabilities {
			if grammar.CapabilityFamily(c.ID) == grammar.TrustFamily || !grammar.ValidCapabilityRecordID(c.ID) {
				t.Fatalf("accepted id %q", c.ID)
			}
			if len(c.Attrs) > grammar.MaxCapabilityAttrs || !grammar.ValidCapabilityState(c.State) {
				t.Fatalf("accepted record %+v", c)
			}
		}
		if load, ok := got.Load(); ok != (len(got.Capabilities) > 0) || load < 0 || load > 1 {
			t.Fatalf("Load() = %v, %v", load, ok)
		}
		again, err := Sign(key, got, 2, t0, DefaultTTL)
		if err != nil {
			t.Fatalf("verified facts do not sign again: %v", err)
		}
		back, _, err := Verify(again, pubOf(key), t0)
		if err != nil {
			t.Fatalf("re-signed facts do not verify: %v", err)
		}
		if diff := cmp.Diff(got.Capabilities, back.Capabilities); diff != "" {
			t.Fatalf("round trip changed the capabilities (-first +second):\n%s", diff)
		}
	})
}
