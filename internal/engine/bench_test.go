package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
)

// benchNodes builds n realistic nodes, about 30 capabilities each: CPU,
// OS, runtimes, labels, network, disks, 0 to 4 GPUs (exclusive, some
// busy), measured serving speed, three instances, and memory with a
// pending reservation on some. They come in no particular order of id.
func benchNodes(n int) []Node {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	nodes := make([]Node, n)
	for i := range nodes {
		caps := []Capability{
			{ID: "os.linux", Provenance: "probed"},
			{ID: "os.distro.debian", Provenance: "probed", Attrs: []Attr{{"version", grammar.IntValue(12)}}},
			{ID: "os.kernel.linux", Provenance: "probed", Attrs: []Attr{{"release", grammar.StringValue("6.1.0")}}},
			{ID: "cpu.arch.amd64", Provenance: "probed"},
			{ID: "cpu.cores", Provenance: "probed", Attrs: []Attr{{"count", grammar.IntValue(int64(8 << rng.IntN(3)))}}},
			{ID: "cpu.model.epyc", Provenance: "probed", Attrs: []Attr{{"name", grammar.StringValue("AMD EPYC 7443")}}},
			{ID: "cpu.features.avx2", Provenance: "probed"},
			{ID: "cpu.features.avx512", Provenance: "probed"},
			{ID: "mem.system", Provenance: "probed", Attrs: []Attr{{"total", grammar.IntValue(256 * gib)}}},
			{ID: "runtime.process", Provenance: "probed"},
			{ID: "runtime.native", Provenance: "probed", Attrs: []Attr{{"arches_native", grammar.ListValue(grammar.StringValue("amd64"))}}},
			{ID: "runtime.llamacpp", Provenance: "probed", Attrs: []Attr{{"version", grammar.IntValue(4100 + int64(rng.IntN(200)))}}},
			{ID: "runtime.ollama", Provenance: "probed", State: []string{"available", "busy"}[rng.IntN(2)]},
			{ID: "runtime.container.docker", Provenance: "probed",
				Attrs: []Attr{{"arches_native", grammar.ListValue(grammar.StringValue("amd64"))}, {"arches_emulated", grammar.ListValue(grammar.StringValue("arm64"))}}},
			{ID: fmt.Sprintf("label.rack.r%d", rng.IntN(20)), Provenance: "claimed"},
			{ID: fmt.Sprintf("label.zone.z%d", rng.IntN(4)), Provenance: "claimed"},
			{ID: "label.team.ml", Provenance: "claimed"},
			{ID: "net.iface.eth0", Provenance: "probed", Attrs: []Attr{{"speed_mbps", grammar.IntValue(25000)}}},
			{ID: "net.rtt.lan", Provenance: "measured", Attrs: []Attr{{"ms", grammar.FloatValue(0.2)}}},
			{ID: "disk.nvme.0", Provenance: "probed", Attrs: []Attr{{"bytes", grammar.IntValue(2 << 40)}}},
			{ID: "disk.nvme.1", Provenance: "probed", Attrs: []Attr{{"bytes", grammar.IntValue(2 << 40)}}},
			{ID: "perf.infer.embed", Provenance: "measured", Attrs: []Attr{{"model", grammar.StringValue("bge-m3")}, {AttrValue, grammar.FloatValue(4 + rng.Float64())}}},
			{ID: "perf.infer.chat", Provenance: "measured", Attrs: []Attr{{"model", grammar.StringValue("qwen-7b")}, {AttrValue, grammar.FloatValue(20 + 40*rng.Float64())}}},
			{ID: "perf.infer.chat", Provenance: "measured", Attrs: []Attr{{"model", grammar.StringValue("llama-70b")}, {AttrValue, grammar.FloatValue(80 + 40*rng.Float64())}}},
			{ID: "node.class.server", Provenance: "claimed"},
		}
		var vram []uint64
		for g := range rng.IntN(5) {
			mem := []int64{16 * gib, 24 * gib, 48 * gib, 80 * gib}[rng.IntN(4)]
			state := "available"
			if rng.IntN(3) == 0 {
				state = "busy"
			}
			caps = append(caps, Capability{ID: fmt.Sprintf("accel.gpu.nvidia.%d", g), Provenance: "probed", Exclusive: true, State: state,
				Attrs: []Attr{{AttrMemBytes, grammar.IntValue(mem)}, {"index", grammar.IntValue(int64(g))}, {"cuda", grammar.BoolValue(true)}, {"model", grammar.StringValue("A100")}}})
			vram = append(vram, uint64(mem)/2)
		}
		for len(caps) < 30 {
			caps = append(caps, Capability{ID: fmt.Sprintf("feature.x%d.enabled", len(caps)), Provenance: "claimed"})
		}
		rng.Shuffle(len(caps), func(a, b int) { caps[a], caps[b] = caps[b], caps[a] })
		// As if decoded from the node's signed facts: every id and
		// attribute lives on the heap, allocated node by node.
		for k := range caps {
			c := &caps[k]
			c.ID = strings.Clone(c.ID)
			attrs := make([]Attr, len(c.Attrs))
			for a, at := range c.Attrs {
				attrs[a] = Attr{Name: strings.Clone(at.Name), Value: at.Value}
				if s, ok := at.Value.Str(); ok {
					attrs[a].Value = grammar.StringValue(strings.Clone(s))
				}
			}
			c.Attrs = attrs
		}
		node := Node{
			ID:           fmt.Sprintf("n-%016x", rng.Uint64()),
			Trust:        []Trust{TrustPaired, TrustPinned}[rng.IntN(2)],
			Liveness:     Alive,
			Capabilities: caps,
			Memory:       Memory{HostFree: uint64(8+rng.IntN(120)) * gib, VRAMFree: vram},
			Gate:         VerdictAllow,
			Instances: []Instance{
				{Kind: "inference", Name: "embed", Labels: []string{"embed", "small"}},
				{Kind: "service", Name: "metrics", Labels: []string{"infra"}},
				{Kind: "inference", Name: fmt.Sprintf("chat-%d", rng.IntN(4)), Labels: []string{"chat"}, Excludes: []string{"batch"}},
			},
		}
		switch rng.IntN(20) {
		case 0:
			node.Liveness = Dead
		case 1:
			node.Pending = []Resources{{HostBytes: 16 * gib, AccelBytes: 40 * gib}}
		case 2:
			node.Gate, node.GateReason = VerdictDeny, "node tier"
		}
		nodes[i] = node
	}
	return nodes
}

// benchRequest is a chat workload: common requirements (Linux, amd64,
// a recent llama.cpp), a single-GPU, a dual-GPU and a CPU variant, labels
// and excludes, a perf target, a zone preference and an avoid list.
func benchRequest() Request {
	return Request{
		Kind: "inference", Name: "chat-qwen-7b",
		Requirements: []Requirement{
			{Selector: "os.linux"},
			{Selector: "cpu.arch.amd64"},
			{Selector: "runtime.llamacpp", Predicates: []Predicate{{"version", "gte", grammar.IntValue(4000)}}},
		},
		Variants: []Variant{
			{Name: "cuda", Requirements: []Requirement{
				{Selector: "accel.gpu", Exclusive: true, Predicates: []Predicate{{AttrMemBytes, "gte", grammar.IntValue(24 * gib)}, {"cuda", "eq", grammar.BoolValue(true)}}},
			}, Resources: Resources{HostBytes: 4 * gib, AccelBytes: 10 * gib}},
			{Name: "cuda-2x", Requirements: []Requirement{
				{Selector: "accel.gpu.nvidia", Exclusive: true, Count: 2, Predicates: []Predicate{{AttrMemBytes, "gte", grammar.IntValue(16 * gib)}}},
			}, Resources: Resources{HostBytes: 4 * gib, AccelBytes: 14 * gib}},
			{Name: "cpu", Requirements: []Requirement{
				{Selector: "cpu.cores", Predicates: []Predicate{{"count", "gte", grammar.IntValue(32)}}},
				{Selector: "cpu.features.avx512"},
			}, Resources: Resources{HostBytes: 24 * gib}},
		},
		Labels:        []string{"chat"},
		Excludes:      []string{"batch", "gpu-hog"},
		RevocableRefs: []string{"qwen-7b", "key:4f2a", "sha256:9c1e"},
		MinTrust:      TrustPaired,
		Preferences:   []Preference{{Requirement{Selector: "label.zone.z1"}, 5}},
		Perf:          &PerfTarget{ID: "perf.infer.chat", Param: "model", ParamValue: grammar.StringValue("qwen-7b"), Better: BetterLower, Budget: 55, HasBudget: true},
		Interactive:   true,
		Avoid:         []string{"n-0000000000000001"},
	}
}

var benchSizes = []int{100, 1000, 10000}

// reportDecisions reports decisions per second and the cost per node, by
// wall time and by the process's CPU time since cpu0 (cpu-ns/op: the
// figure to compare on a machine shared with other work).
func reportDecisions(b *testing.B, n int, cpu0 time.Duration) {
	perOp := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(1/perOp, "decisions/s")
	b.ReportMetric(perOp*1e9/float64(n), "ns/node")
	if cpu1, ok := cpuTime(); ok {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

// placeFunc is Place or a kept Placer's Place.
type placeFunc func(Request, []Node, Cluster, Weights) (Decision, error)

// benchPlace is one decision per iteration over n realistic nodes, for
// each of benchSizes: nodesOf builds the nodes before the timer starts,
// newPlace gives the decision function once per size (a Placer made
// there is kept across that size's decisions).
func benchPlace(b *testing.B, nodesOf func(n int) []Node, newPlace func() placeFunc) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			req, cl, w := benchRequest(), Cluster{RevokedNodes: []string{"n-00000000000000ff"}}, DefaultWeights()
			nodes := nodesOf(n)
			place := newPlace()
			d, err := place(req, nodes, cl, w)
			if err != nil || d.Chosen == nil {
				b.Fatalf("Place: %v, chosen %v", err, d.Chosen)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, _ := cpuTime()
			for b.Loop() {
				if _, err := place(req, nodes, cl, w); err != nil {
					b.Fatal(err)
				}
			}
			reportDecisions(b, n, cpu0)
		})
	}
}

// placeEach is Place itself, with no state between decisions.
func placeEach() placeFunc { return Place }

// placeKept is one Placer's Place, kept across the decisions.
func placeKept() placeFunc {
	var pl Placer
	return pl.Place
}

// preparedNodes is benchNodes with their Profiles prepared.
func preparedNodes(n int) []Node { return prepared(NewSymbols(), benchNodes(n)) }

// BenchmarkPlace is one decision over n realistic nodes. Run it with
// -cpu 1; ns/node and allocs/node show the cost is linear in nodes.
func BenchmarkPlace(b *testing.B) {
	benchPlace(b, benchNodes, placeEach)
}

// BenchmarkPlacePrepared is one decision over n realistic nodes given
// with their Profiles, prepared once before the timer starts, as a
// caller that keeps them between decisions does. BenchmarkPlace pays for
// preparing every node in every decision.
func BenchmarkPlacePrepared(b *testing.B) {
	benchPlace(b, preparedNodes, placeEach)
}

// BenchmarkPlacer is BenchmarkPlacePrepared with one Placer kept across
// the decisions, as the controller keeps one: its working memory and
// its order of the node ids are reused.
func BenchmarkPlacer(b *testing.B) {
	benchPlace(b, preparedNodes, placeKept)
}

// BenchmarkPlacerCompact is BenchmarkPlacer with the Profiles compacted
// (Compact) in the order of the nodes, as the controller keeps them.
func BenchmarkPlacerCompact(b *testing.B) {
	benchPlace(b, func(n int) []Node { return compacted(preparedNodes(n)) }, placeKept)
}

// BenchmarkCompact is compacting n realistic nodes' Profiles: what the
// controller pays when it compacts its view again.
func BenchmarkCompact(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes := prepared(NewSymbols(), benchNodes(n))
			prs := make([]*Profile, n)
			for i := range nodes {
				prs[i] = nodes[i].Profile
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, _ := cpuTime()
			for b.Loop() {
				Compact(prs)
			}
			reportDecisions(b, n, cpu0)
		})
	}
}

// BenchmarkPrepare is preparing n realistic nodes' records into one
// Symbols, as a caller does when their facts change: the cost that
// BenchmarkPlace adds to BenchmarkPlacePrepared, without a decision.
func BenchmarkPrepare(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes := benchNodes(n)
			b.ReportAllocs()
			for b.Loop() {
				syms := NewSymbols()
				for i := range nodes {
					syms.Prepare(nodes[i].Capabilities, nodes[i].Memory)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/float64(n), "ns/node")
		})
	}
}

// BenchmarkReadIDs reads what any decision over the nodes must read:
// the first byte of every capability id (and each node's capability
// list), node by node, with nothing else. It is the floor under
// BenchmarkPlace's ns/node that memory alone sets, for this layout of
// the nodes (ids and attributes each on the heap, as decoded from facts).
func BenchmarkReadIDs(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes := benchNodes(n)
			sum := 0
			for b.Loop() {
				for i := range nodes {
					caps := nodes[i].Capabilities
					for k := range caps {
						if id := caps[k].ID; id != "" {
							sum += int(id[0])
						}
					}
				}
			}
			if sum == 0 {
				b.Fatal("read nothing")
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/float64(n), "ns/node")
		})
	}
}

// BenchmarkExplain is the cost of the explanation text alone, which Place
// does not pay.
func BenchmarkExplain(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			d, err := Place(benchRequest(), benchNodes(n), Cluster{}, DefaultWeights())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_ = d.Explain()
			}
		})
	}
}
