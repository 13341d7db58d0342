package engine_test

import (
	"fmt"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/grammar"
)

// A chat model with a GPU route and a CPU route, placed over a GPU
// server, a CPU server, a developer's laptop and a dead, untrusted node.
// docs/architecture.md walks through this output.
func ExamplePlace() {
	const gib = 1 << 30
	req := engine.Request{
		Kind: "inference", Name: "chat-qwen-7b",
		Requirements: []engine.Requirement{{Selector: "os.linux"}, {Selector: "runtime.llamacpp"}},
		Variants: []engine.Variant{
			{Name: "cuda", Requirements: []engine.Requirement{{Selector: "accel.gpu", Exclusive: true,
				Predicates: []engine.Predicate{{Attr: engine.AttrMemBytes, Op: "gte", Value: grammar.IntValue(16 * gib)}}}},
				Resources: engine.Resources{HostBytes: 4 * gib, AccelBytes: 9 * gib}},
			{Name: "cpu", Requirements: []engine.Requirement{{Selector: "cpu.cores",
				Predicates: []engine.Predicate{{Attr: "count", Op: "gte", Value: grammar.IntValue(8)}}}},
				Resources: engine.Resources{HostBytes: 12 * gib}},
		},
		MinTrust: engine.TrustPaired,
		Perf: &engine.PerfTarget{ID: "perf.infer.chat", Param: "model", ParamValue: grammar.StringValue("qwen-7b"),
			Better: engine.BetterLower},
	}
	linux := engine.Capability{ID: "os.linux", Provenance: "probed"}
	llama := engine.Capability{ID: "runtime.llamacpp", Provenance: "probed"}
	speed := func(ms float64) engine.Capability {
		return engine.Capability{ID: "perf.infer.chat", Provenance: "measured",
			Attrs: []engine.Attr{{Name: "model", Value: grammar.StringValue("qwen-7b")}, {Name: engine.AttrValue, Value: grammar.FloatValue(ms)}}}
	}
	nodes := []engine.Node{
		{ID: "n-gpu", Trust: engine.TrustPinned, Liveness: engine.Alive, Gate: engine.VerdictAllow,
			Capabilities: []engine.Capability{linux, llama, speed(38),
				{ID: "accel.gpu.nvidia.0", Provenance: "probed", Exclusive: true,
					Attrs: []engine.Attr{{Name: engine.AttrMemBytes, Value: grammar.IntValue(24 * gib)}}}},
			Memory: engine.Memory{HostFree: 64 * gib, VRAMFree: []uint64{22 * gib}}},
		{ID: "n-cpu", Trust: engine.TrustPaired, Liveness: engine.Alive, Gate: engine.VerdictAllow,
			Capabilities: []engine.Capability{linux, llama, speed(95),
				{ID: "cpu.cores", Provenance: "probed", Attrs: []engine.Attr{{Name: "count", Value: grammar.IntValue(32)}}}},
			Memory: engine.Memory{HostFree: 48 * gib}},
		{ID: "n-mac", Trust: engine.TrustPaired, Liveness: engine.Alive, Gate: engine.VerdictAllow,
			Capabilities: []engine.Capability{linux, llama, {ID: "node.class.dev-mac", Provenance: "claimed"},
				{ID: "cpu.cores", Provenance: "probed", Attrs: []engine.Attr{{Name: "count", Value: grammar.IntValue(10)}}}},
			Memory: engine.Memory{Unified: true, HostFree: 24 * gib}},
		{ID: "n-old", Trust: engine.TrustDiscovered, Liveness: engine.Dead,
			Gate: engine.VerdictDeny, GateReason: "node tier discovered below paired",
			Capabilities: []engine.Capability{linux}, Memory: engine.Memory{HostFree: 8 * gib}},
	}
	d, err := engine.Place(req, nodes, engine.Cluster{}, engine.DefaultWeights())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Chosen.Node, d.Chosen.Variant, d.Chosen.Accelerator)
	fmt.Print(d.Explain())
	// Output:
	// n-gpu cuda accel.gpu.nvidia.0
	// workload chat-qwen-7b (kind inference)
	//   allow_emulated: false   pin: -
	//   tier order (strict): native > emulated > dev_fallback (candidates rank by tier, then score)
	// decision: PLACED on n-gpu via cuda (tier native, emulated false) score 150.00, accelerator accel.gpu.nvidia.0
	// candidates:
	//   1. n-gpu eligible via cuda (tier native) score 150.00
	//        execution 100.00 + locality 0.00 + accel_fit 10.00 + perf 30.00 + load 10.00 + stickiness 0.00
	//   2. n-cpu eligible via cpu (tier native) score 132.00
	//        execution 100.00 + locality 0.00 + accel_fit 10.00 + perf 12.00 + load 10.00 + stickiness 0.00
	//   3. n-mac eligible via cpu (tier dev_fallback) score 40.00 [unmeasured]
	//        execution 20.00 + locality 0.00 + accel_fit 10.00 + perf 0.00 + load 10.00 + stickiness 0.00
	//   -  n-old rejected
	//        liveness: node is dead
	//        trust: tier discovered below required paired
	//        requirements: `runtime.llamacpp`: not advertised
	//        requirements: variant cuda: `accel.gpu`: not advertised
	//        memory: variant cuda: vram pool: need 9663676416 bytes, free 0 bytes
	//        requirements: variant cpu: `cpu.cores`: not advertised
	//        memory: variant cpu: system pool: need 12884901888 bytes, free 8589934592 bytes
	//        gate: workload.place denied: node tier discovered below paired
}

// A caller that places often keeps one Symbols and each node's Profile,
// prepared when the node's facts change, and gives the Profiles to every
// decision.
func ExampleSymbols_Prepare() {
	const gib = 1 << 30
	syms := engine.NewSymbols()
	records := map[string][]engine.Capability{
		"n-1": {{ID: "os.linux", Provenance: "probed"}, {ID: "cpu.cores", Provenance: "probed",
			Attrs: []engine.Attr{{Name: "count", Value: grammar.IntValue(8)}}}},
		"n-2": {{ID: "os.linux", Provenance: "probed"}, {ID: "cpu.cores", Provenance: "probed",
			Attrs: []engine.Attr{{Name: "count", Value: grammar.IntValue(32)}}}},
	}
	// Prepared once, when the facts arrive.
	profiles := map[string]*engine.Profile{}
	for id, caps := range records {
		profiles[id] = syms.Prepare(caps, engine.Memory{HostFree: 64 * gib})
	}
	place := func(cores int64) string {
		req := engine.Request{Kind: "service", Name: "batch", MinTrust: engine.TrustPaired,
			Variants: []engine.Variant{{Name: "cpu", Requirements: []engine.Requirement{{Selector: "cpu.cores",
				Predicates: []engine.Predicate{{Attr: "count", Op: "gte", Value: grammar.IntValue(cores)}}}},
				Resources: engine.Resources{HostBytes: 4 * gib}}}}
		var nodes []engine.Node
		for _, id := range []string{"n-1", "n-2"} {
			nodes = append(nodes, engine.Node{ID: id, Trust: engine.TrustPaired, Liveness: engine.Alive,
				Gate: engine.VerdictAllow, Profile: profiles[id]})
		}
		d, err := engine.Place(req, nodes, engine.Cluster{}, engine.DefaultWeights())
		if err != nil || d.Chosen == nil {
			return fmt.Sprint("unplaced: ", err)
		}
		return d.Chosen.Node + " (" + d.Candidates[len(d.Candidates)-1].Node + " ranked last)"
	}
	// Every decision reuses them.
	fmt.Println(place(4))
	fmt.Println(place(16))
	// Output:
	// n-1 (n-2 ranked last)
	// n-2 (n-1 ranked last)
}
