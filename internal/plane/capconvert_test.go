package plane

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// engineValues lets cmp compare grammar.Value, whose fields are
// unexported: an int must not compare equal to a float.
var engineValues = cmp.Comparer(func(a, b grammar.Value) bool { return a.Equal(b) })

type gv = map[string]grammar.Value

func capRecord(id, prov, state string, attrs gv) facts.Capability {
	return facts.Capability{ID: id, Attrs: attrs, Provenance: prov, State: state}
}

func TestConvertNodeFacts(t *testing.T) {
	const gib = 1 << 30
	probed, measured, claimed := grammar.ProvenanceProbed, grammar.ProvenanceMeasured, grammar.ProvenanceClaimed
	avail, busy := grammar.StateAvailable, grammar.StateBusy
	i, s := grammar.IntValue, grammar.StringValue

	withRecords := sampleFacts()
	withRecords.GPUs = append(withRecords.GPUs, facts.GPU{Index: 1, Name: "gpu", VRAMTotalBytes: 48 * gib, VRAMFreeBytes: 40 * gib})
	withRecords.Capabilities = []facts.Capability{
		capRecord("cpu.arch.amd64", probed, avail, gv{"name": s("amd64")}),
		capRecord("mem.system", probed, avail, gv{"total": i(32 * gib), "free": i(16 * gib)}),
		capRecord("accel.gpu.nvidia.rtx-4090", probed, busy, gv{"index": i(0), "mem_bytes": i(24 * gib), "utilization_pct": i(97)}),
		capRecord("mem.vram", probed, avail, gv{"index": i(0), "total": i(24 * gib), "free": i(20 * gib)}),
		capRecord("accel.gpu.nvidia.a6000", probed, avail, gv{"index": i(1), "mem_bytes": i(48 * gib)}),
		capRecord("mem.vram", probed, avail, gv{"index": i(1), "total": i(48 * gib), "free": i(40 * gib)}),
		capRecord("runtime.llamacpp", probed, avail, gv{"name": s("llama.cpp"), "version": s("b4000")}),
		capRecord("perf.infer.chat", measured, avail, gv{"metric": s("ttfb_ms"), "value": grammar.FloatValue(41.5), "samples": i(20)}),
		{ID: "label.zone", Attrs: gv{"value": grammar.ListValue(s("a"), i(2), grammar.BoolValue(true))}, Provenance: claimed, State: avail, Exclusive: true},
	}

	unified := facts.Facts{OS: "darwin", Arch: "arm64", MemTotalBytes: 64 * gib, MemFreeBytes: 1, Runtimes: []string{"process"},
		Capabilities: []facts.Capability{
			capRecord("mem.unified", probed, avail, gv{"total": i(64 * gib), "free": i(48 * gib)}),
			capRecord("accel.gpu.apple.m2-max", probed, avail, gv{"index": i(0), "mem_bytes": i(64 * gib)}),
		}}

	old := sampleFacts()
	old.Runtimes = []string{"llama.cpp", "process"}

	e := func(name string, v grammar.Value) engine.Attr { return engine.Attr{Name: name, Value: v} }
	ei, es := grammar.IntValue, grammar.StringValue
	tests := []struct {
		name     string
		give     facts.Facts
		wantCaps []engine.Capability
		wantMem  engine.Memory
	}{
		{
			name: "capability records convert one to one",
			give: withRecords,
			wantCaps: []engine.Capability{
				{ID: "cpu.arch.amd64", Provenance: probed, State: avail, Attrs: []engine.Attr{e("name", es("amd64"))}},
				{ID: "mem.system", Provenance: probed, State: avail, Attrs: []engine.Attr{e("free", ei(16*gib)), e("total", ei(32*gib))}},
				{ID: "accel.gpu.nvidia.rtx-4090", Provenance: probed, State: busy, Attrs: []engine.Attr{e("index", ei(0)), e("mem_bytes", ei(24*gib)), e("utilization_pct", ei(97))}},
				{ID: "mem.vram", Provenance: probed, State: avail, Attrs: []engine.Attr{e("free", ei(20*gib)), e("index", ei(0)), e("total", ei(24*gib))}},
				{ID: "accel.gpu.nvidia.a6000", Provenance: probed, State: avail, Attrs: []engine.Attr{e("index", ei(1)), e("mem_bytes", ei(48*gib))}},
				{ID: "mem.vram", Provenance: probed, State: avail, Attrs: []engine.Attr{e("free", ei(40*gib)), e("index", ei(1)), e("total", ei(48*gib))}},
				{ID: "runtime.llamacpp", Provenance: probed, State: avail, Attrs: []engine.Attr{e("name", es("llama.cpp")), e("version", es("b4000"))}},
				{ID: "perf.infer.chat", Provenance: measured, State: avail, Attrs: []engine.Attr{e("metric", es("ttfb_ms")), e("samples", ei(20)), e("value", grammar.FloatValue(41.5))}},
				{ID: "label.zone", Provenance: claimed, State: avail, Exclusive: true, Attrs: []engine.Attr{e("value", grammar.ListValue(es("a"), ei(2), grammar.BoolValue(true)))}},
			},
			// From mem.system and mem.vram, not from the old fields
			// (which say 16 GiB and 20 GiB + 40 GiB as well here, so
			// the unified case below tells them apart).
			wantMem: engine.Memory{HostFree: 16 * gib, VRAMFree: []uint64{20 * gib, 40 * gib}},
		},
		{
			name: "unified memory is one pool",
			give: unified,
			wantCaps: []engine.Capability{
				{ID: "mem.unified", Provenance: probed, State: avail, Attrs: []engine.Attr{e("free", ei(48*gib)), e("total", ei(64*gib))}},
				{ID: "accel.gpu.apple.m2-max", Provenance: probed, State: avail, Attrs: []engine.Attr{e("index", ei(0)), e("mem_bytes", ei(64*gib))}},
			},
			wantMem: engine.Memory{Unified: true, HostFree: 48 * gib},
		},
		{
			name: "facts signed before capability records keep the old derivation",
			give: old,
			wantCaps: []engine.Capability{
				{ID: "cpu.arch.amd64", Provenance: probed, Attrs: []engine.Attr{e("name", es("amd64"))}},
				{ID: "os.linux", Provenance: probed, Attrs: []engine.Attr{e("name", es("linux"))}},
				// As requirements name the runtime (grammar.RuntimeCapabilityID).
				{ID: "runtime.llamacpp", Provenance: probed},
				{ID: "runtime.process", Provenance: probed},
				{ID: "accel.gpu.0", Provenance: probed, Attrs: []engine.Attr{e("mem_bytes", ei(24*gib))}},
				{ID: "label.rack", Provenance: claimed, Attrs: []engine.Attr{e("value", es("a"))}},
			},
			wantMem: engine.Memory{HostFree: 16 * gib, VRAMFree: []uint64{20 * gib}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.wantCaps, capabilities(tt.give), engineValues); d != "" {
				t.Errorf("capabilities (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantMem, memory(tt.give)); d != "" {
				t.Errorf("memory (-want +got):\n%s", d)
			}
		})
	}
}

func TestConvertManifest(t *testing.T) {
	const gib = 1 << 30
	claimed, probed, measured := grammar.ProvenanceClaimed, grammar.ProvenanceProbed, grammar.ProvenanceMeasured
	budget := 250.0
	full := &pkg.Manifest{
		ID: "chat", Version: "1", Kind: pkg.KindInference, Role: "chat", Runtime: pkg.Runtime{Type: "llama.cpp"},
		Labels: []string{"llm"}, Excludes: []string{"batch"}, Sticky: true,
		PerfTarget: &pkg.PerfTarget{ID: "perf.infer.chat", Param: "metric", ParamValue: grammar.StringValue("ttfb_ms"), Better: grammar.PerfBetterLower, Budget: &budget},
		Variants: []pkg.Variant{
			{
				Name: "cuda",
				Requirements: []pkg.Requirement{
					{Select: "accel.gpu.nvidia", Count: 2, Exclusive: true, MinProvenance: probed, Predicates: []pkg.Predicate{
						{Attr: "mem_bytes", Op: grammar.OpGte, Value: grammar.IntValue(16 * gib)},
						{Attr: "utilization_pct", Op: grammar.OpLte, Value: grammar.FloatValue(50.5)},
						{Attr: "name", Op: grammar.OpIn, Value: grammar.ListValue(grammar.StringValue("a6000"), grammar.StringValue("h100"))},
					}},
					{Select: "perf.infer.chat", MinProvenance: measured},
				},
				Resources: pkg.Resources{MemBytes: 2 * gib, VRAMBytes: 30 * gib},
			},
			{Name: "x86", Execution: grammar.ExecutionEmulated, Requires: pkg.Requires{Arch: []string{"amd64"}}, Resources: pkg.Resources{MemBytes: 8 * gib}},
		},
	}
	old := &pkg.Manifest{
		ID: "echo", Version: "1", Kind: pkg.KindService, Runtime: pkg.Runtime{Type: "process"},
		Variants: []pkg.Variant{{Name: "cpu", Requires: pkg.Requires{
			Arch: []string{"amd64"}, OS: []string{"linux", "darwin"}, GPU: true, Runtimes: []string{"llama.cpp"},
		}, Resources: pkg.Resources{MemBytes: gib}}},
	}
	names := grammar.ListValue(grammar.StringValue("a6000"), grammar.StringValue("h100"))
	tests := []struct {
		name string
		give *pkg.Manifest
		want engine.Request
	}{
		{
			name: "requirements, predicates, execution, labels, perf target, sticky",
			give: full,
			want: engine.Request{
				Kind: pkg.KindInference, Name: "chat", MinTrust: engine.TrustPaired,
				Requirements: []engine.Requirement{{Selector: "runtime.llamacpp", Count: 1, MinProvenance: claimed}},
				Variants: []engine.Variant{
					{Name: "cuda", Execution: engine.Native, Resources: engine.Resources{HostBytes: 2 * gib, AccelBytes: 30 * gib},
						Requirements: []engine.Requirement{
							{Selector: "accel.gpu.nvidia", Count: 2, Exclusive: true, MinProvenance: probed, Predicates: []engine.Predicate{
								{Attr: "mem_bytes", Op: grammar.OpGte, Value: grammar.IntValue(16 * gib)},
								{Attr: "utilization_pct", Op: grammar.OpLte, Value: grammar.FloatValue(50.5)},
								{Attr: "name", Op: grammar.OpIn, Value: names},
							}},
							{Selector: "perf.infer.chat", Count: 1, MinProvenance: measured},
						}},
					{Name: "x86", Execution: engine.Emulated, Resources: engine.Resources{HostBytes: 8 * gib},
						Requirements: []engine.Requirement{{Selector: "cpu.arch.amd64", Count: 1, MinProvenance: claimed}}},
				},
				Labels: []string{"llm"}, Excludes: []string{"batch"}, RevocableRefs: []string{"chat", "h"},
				Perf:   &engine.PerfTarget{ID: "perf.infer.chat", Param: "metric", ParamValue: grammar.StringValue("ttfb_ms"), Better: engine.BetterLower, Budget: 250, HasBudget: true},
				Sticky: true,
			},
		},
		{
			name: "old requires block reads as EffectiveRequirements",
			give: old,
			want: engine.Request{
				Kind: pkg.KindService, Name: "echo", MinTrust: engine.TrustPaired,
				Requirements: []engine.Requirement{{Selector: "runtime.process", Count: 1, MinProvenance: claimed}},
				Variants: []engine.Variant{{Name: "cpu", Resources: engine.Resources{HostBytes: gib},
					Requirements: []engine.Requirement{
						{Selector: "cpu.arch.amd64", Count: 1, MinProvenance: claimed},
						{Selector: "os", Count: 1, MinProvenance: claimed, Predicates: []engine.Predicate{
							{Attr: "name", Op: grammar.OpIn, Value: grammar.ListValue(grammar.StringValue("linux"), grammar.StringValue("darwin"))},
						}},
						{Selector: "accel.gpu", Count: 1, MinProvenance: claimed},
						{Selector: "runtime.llamacpp", Count: 1, MinProvenance: claimed},
					}}},
				RevocableRefs: []string{"echo", "h"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := request(&pkg.Verified{Manifest: tt.give, ManifestHash: "h"}, Order{}, engine.TrustPaired)
			if d := cmp.Diff(tt.want, got, engineValues); d != "" {
				t.Errorf("request (-want +got):\n%s", d)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("converted request is invalid: %v", err)
			}
			// Every variant's requirements are its EffectiveRequirements,
			// selector for selector.
			for k, va := range tt.give.Variants {
				var want, sel []string
				for _, r := range va.EffectiveRequirements() {
					want = append(want, r.Select)
				}
				for _, r := range got.Variants[k].Requirements {
					sel = append(sel, r.Selector)
				}
				if d := cmp.Diff(want, sel); d != "" {
					t.Errorf("variant %s selectors (-EffectiveRequirements +got):\n%s", va.Name, d)
				}
			}
		})
	}
}

// TestPlaceOnTheOnlyNodeWithTheCapability: a requirement on a capability
// record only one node's facts carry places there, and the explanation
// says why the others were rejected.
func TestPlaceOnTheOnlyNodeWithTheCapability(t *testing.T) {
	const gib = 1 << 30
	r, hs := newRig(t, 8, 8, 8)
	base := []facts.Capability{
		capRecord("cpu.arch.amd64", grammar.ProvenanceProbed, grammar.StateAvailable, gv{"name": grammar.StringValue("amd64")}),
		capRecord("mem.system", grammar.ProvenanceProbed, grammar.StateAvailable, gv{"total": grammar.IntValue(32 * gib), "free": grammar.IntValue(8 * gib)}),
		capRecord("runtime.process", grammar.ProvenanceProbed, grammar.StateAvailable, gv{"name": grammar.StringValue("process")}),
	}
	gpu := func(memGiB int64) []facts.Capability {
		return []facts.Capability{
			capRecord("accel.gpu.nvidia.rtx", grammar.ProvenanceProbed, grammar.StateAvailable, gv{"index": grammar.IntValue(0), "mem_bytes": grammar.IntValue(memGiB * gib)}),
			capRecord("mem.vram", grammar.ProvenanceProbed, grammar.StateAvailable, gv{"index": grammar.IntValue(0), "total": grammar.IntValue(memGiB * gib), "free": grammar.IntValue(memGiB * gib)}),
		}
	}
	// hs[0]: no GPU; hs[1]: an 8 GiB GPU; hs[2]: a 24 GiB GPU. The old
	// fields say none has a GPU, so only the records can place it.
	r.cl.Set(hs[0], func(h *planetest.Host) { h.Facts.Capabilities = base })
	r.cl.Set(hs[1], func(h *planetest.Host) { h.Facts.Capabilities = append(gpu(8), base...) })
	r.cl.Set(hs[2], func(h *planetest.Host) { h.Facts.Capabilities = append(gpu(24), base...) })
	r.cl.Mu.Lock()
	r.cl.Pkgs["/pkg/cuda"] = &pkg.Verified{ManifestHash: pkg.ManifestHash([]byte("cuda")), Manifest: &pkg.Manifest{
		Schema: 1, ID: "cuda", Version: "1.0.0", Kind: pkg.KindService, Runtime: pkg.Runtime{Type: "process"},
		Variants: []pkg.Variant{{Name: "gpu",
			Requirements: []pkg.Requirement{{Select: "accel.gpu.nvidia", Predicates: []pkg.Predicate{
				{Attr: "mem_bytes", Op: grammar.OpGte, Value: grammar.IntValue(16 * gib)},
			}}},
			Resources: pkg.Resources{MemBytes: gib, VRAMBytes: 12 * gib}}},
	}}
	r.cl.Mu.Unlock()
	r.tick()

	rep := r.place(Order{PackageDir: "/pkg/cuda", Start: true})
	if rep.Placed == nil || rep.Placed.Node != hs[2].ID {
		t.Fatalf("placed %+v, want on %s\n%s", rep.Placed, hs[2].ID, rep.Decision.Explain())
	}
	for _, h := range hs[:2] {
		var rejected bool
		for _, c := range rep.Decision.Candidates {
			if c.Node != h.ID {
				continue
			}
			for _, rj := range c.Rejections {
				rejected = rejected || rj.Code == engine.CodeRequirements
			}
		}
		if !rejected {
			t.Errorf("%s not rejected for its requirements\n%s", h.ID, rep.Decision.Explain())
		}
	}
	ex := rep.Decision.Explain()
	for _, want := range []string{hs[0].ID, hs[1].ID, string(engine.CodeRequirements), "accel.gpu.nvidia"} {
		if !strings.Contains(ex, want) {
			t.Errorf("explanation does not name %q:\n%s", want, ex)
		}
	}
}
