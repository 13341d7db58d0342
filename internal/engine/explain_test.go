package engine

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeld/nodeld/internal/grammar"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current explanations")

// fleet is a small mixed cluster for the explanation goldens: a GPU
// server, a CPU box, an ARM board that only emulates, a dev laptop, and
// nodes that fail in various ways.
func fleet() []Node {
	linux := Capability{ID: "os.linux", Provenance: "probed"}
	llama := Capability{ID: "runtime.llamacpp", Provenance: "probed"}
	gpuServer := Node{
		ID: "n-gpu-1", Trust: TrustPinned, Liveness: Alive, Gate: VerdictAllow,
		Capabilities: []Capability{linux, llama,
			{ID: "accel.gpu.nvidia.0", Provenance: "probed", Exclusive: true, Attrs: []Attr{{AttrMemBytes, grammar.IntValue(24 * gib)}}},
			{ID: "accel.gpu.nvidia.1", Provenance: "probed", Exclusive: true, State: "busy", Attrs: []Attr{{AttrMemBytes, grammar.IntValue(24 * gib)}}},
			{ID: "perf.infer.chat", Provenance: "measured", Attrs: []Attr{{"model", grammar.StringValue("qwen-7b")}, {AttrValue, grammar.FloatValue(38)}}},
		},
		Memory: Memory{HostFree: 64 * gib, VRAMFree: []uint64{22 * gib, 0}},
	}
	bigGPU := gpuServer
	bigGPU.ID = "n-gpu-2"
	bigGPU.Capabilities = []Capability{linux, llama,
		{ID: "accel.gpu.nvidia.0", Provenance: "probed", Exclusive: true, Attrs: []Attr{{AttrMemBytes, grammar.IntValue(80 * gib)}}},
		{ID: "label.zone.lab", Provenance: "claimed"},
	}
	bigGPU.Memory = Memory{HostFree: 128 * gib, VRAMFree: []uint64{78 * gib}}
	cpuBox := Node{
		ID: "n-cpu", Trust: TrustPaired, Liveness: Alive, Gate: VerdictAllow,
		Capabilities: []Capability{linux, llama, {ID: "cpu.cores", Provenance: "probed", Attrs: []Attr{{"count", grammar.IntValue(32)}}},
			{ID: "perf.infer.chat", Provenance: "measured", Attrs: []Attr{{"model", grammar.StringValue("qwen-7b")}, {AttrValue, grammar.FloatValue(95)}}}},
		Memory: Memory{HostFree: 48 * gib},
	}
	board := Node{
		ID: "n-board", Trust: TrustPaired, Liveness: Alive, Gate: VerdictAllow,
		Capabilities: []Capability{linux, {ID: "runtime.container.docker", Provenance: "probed", State: "busy"},
			{ID: "cpu.cores", Provenance: "probed", Attrs: []Attr{{"count", grammar.IntValue(4)}}}},
		Memory: Memory{HostFree: 6 * gib},
	}
	laptop := Node{
		ID: "n-mac", Trust: TrustPaired, Liveness: Alive, Gate: VerdictAllow,
		Capabilities: []Capability{{ID: "os.linux", Provenance: "claimed"}, llama, {ID: "node.class.dev-mac", Provenance: "claimed"},
			{ID: "cpu.cores", Provenance: "probed", Attrs: []Attr{{"count", grammar.IntValue(10)}}}},
		Memory: Memory{Unified: true, HostFree: 24 * gib},
	}
	dead := cpuBox
	dead.ID, dead.Liveness, dead.Gate, dead.GateReason = "n-gone", Dead, VerdictDeny, "node tier discovered below paired"
	dead.Trust = TrustDiscovered
	full := gpuServer
	full.ID = "n-full"
	full.Pending = []Resources{{HostBytes: 60 * gib, AccelBytes: 20 * gib}}
	noisy := cpuBox
	noisy.ID = "n-noisy"
	noisy.Instances = []Instance{{Kind: "service", Name: "trainer", Labels: []string{"batch"}}}
	noisy.Capabilities = noisy.Capabilities[:2]
	return []Node{gpuServer, bigGPU, cpuBox, board, laptop, dead, full, noisy}
}

// fleetRequest has a GPU route, a CPU route and an emulated container
// route, a perf target and a preference for the lab zone.
func fleetRequest() Request {
	return Request{
		Kind: "inference", Name: "chat-qwen-7b",
		Requirements: []Requirement{{Selector: "os.linux"}},
		Variants: []Variant{
			{Name: "cuda", Requirements: []Requirement{
				{Selector: "runtime.llamacpp"},
				{Selector: "accel.gpu", Exclusive: true, Predicates: []Predicate{{AttrMemBytes, "gte", grammar.IntValue(16 * gib)}}},
			}, Resources: Resources{HostBytes: 4 * gib, AccelBytes: 9 * gib}},
			{Name: "cpu", Requirements: []Requirement{
				{Selector: "runtime.llamacpp"},
				{Selector: "cpu.cores", Predicates: []Predicate{{"count", "gte", grammar.IntValue(8)}}},
			}, Resources: Resources{HostBytes: 12 * gib}},
			{Name: "container", Execution: Emulated, Requirements: []Requirement{{Selector: "runtime.container"}},
				Resources: Resources{HostBytes: 4 * gib}},
		},
		Excludes:    []string{"batch"},
		MinTrust:    TrustPaired,
		Preferences: []Preference{{Requirement{Selector: "label.zone.lab"}, 5}},
		Perf:        &PerfTarget{ID: "perf.infer.chat", Param: "model", ParamValue: grammar.StringValue("qwen-7b"), Better: BetterLower},
	}
}

func TestExplainGolden(t *testing.T) {
	tests := []struct {
		name string
		req  func(*Request)
		w    func(*Weights)
	}{
		{name: "placed", req: func(r *Request) { r.AllowEmulated = true }},
		{name: "no_emulation"},
		{name: "pinned", req: func(r *Request) { r.AllowEmulated, r.Pin = true, "n-board" }},
		{name: "affinity", req: func(r *Request) { r.Avoid, r.CurrentNode = []string{"n-gpu-1"}, "n-cpu" }},
		{name: "unplaceable", req: func(r *Request) { r.MinTrust, r.RevocableRefs = TrustPinned, []string{"sha256:feed"} }},
		{name: "pin_ineligible", req: func(r *Request) { r.Pin = "n-full" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, w := fleetRequest(), DefaultWeights()
			if tt.req != nil {
				tt.req(&req)
			}
			if tt.w != nil {
				tt.w(&w)
			}
			cl := Cluster{RevokedRefs: []string{"sha256:feed"}}
			d, err := Place(req, fleet(), cl, w)
			if err != nil && !errors.Is(err, ErrPinIneligible) {
				t.Fatal(err)
			}
			got := d.Explain()
			golden := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden (run go test -update): %v", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("Explain mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExplainIsPure: explaining twice gives the same text and leaves the
// decision as it was.
func TestExplainIsPure(t *testing.T) {
	d := mustPlace(t, fleetRequest(), fleet(), Cluster{}, DefaultWeights())
	before := d.Explain()
	if after := d.Explain(); after != before {
		t.Error("Explain is not repeatable")
	}
}
