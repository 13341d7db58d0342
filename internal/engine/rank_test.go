package engine

import (
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeld/nodeld/internal/grammar"
)

// tierRequest has a native route (runtime.native) and an emulated one
// (runtime.container), emulation allowed. On tierFleet, n-native places
// natively, n-emu only emulated, n-mac natively on a dev machine.
func tierRequest() Request {
	return Request{
		Kind: "service", Name: "cog", MinTrust: TrustPaired, AllowEmulated: true,
		Variants: []Variant{
			{Name: "native", Requirements: []Requirement{{Selector: "runtime.native"}}},
			{Name: "emulated", Execution: Emulated, Requirements: []Requirement{{Selector: "runtime.container"}}},
		},
	}
}

func tierFleet() []Node {
	node := func(id string, caps ...string) Node {
		n := Node{ID: id, Trust: TrustPaired, Liveness: Alive, Gate: VerdictAllow}
		for _, c := range caps {
			n.Capabilities = append(n.Capabilities, Capability{ID: c, Provenance: "probed"})
		}
		return n
	}
	return []Node{
		node("n-mac", "runtime.native", "node.class.dev-mac", "label.zone.home"),
		node("n-emu", "runtime.container", "label.zone.home"),
		node("n-native", "runtime.native"),
	}
}

// TestStrictTierOrder: whatever bonus favours a lower tier (locality,
// stickiness, affinity, inverted weights, all together), and in either
// input order, the ranking is native, emulated, dev_fallback and the
// native node is chosen (reference 9.14).
func TestStrictTierOrder(t *testing.T) {
	bonuses := []struct {
		name string
		req  func(*Request)
		w    func(*Weights)
	}{
		{"none", nil, nil},
		{"locality", func(r *Request) {
			r.Preferences = []Preference{{Requirement{Selector: "label.zone.home"}, 1e6}}
		}, nil},
		{"sticky", func(r *Request) { r.CurrentNode, r.Sticky = "n-mac", true }, nil},
		{"affinity", func(r *Request) { r.Prefer, r.Avoid = []string{"n-mac", "n-emu"}, []string{"n-native"} }, nil},
		{"inverted weights", nil, func(w *Weights) { w.Native, w.Emulated, w.DevFallback = 0, 500, 1000 }},
		{"all", func(r *Request) {
			r.Preferences = []Preference{{Requirement{Selector: "label.zone.home"}, 1e6}}
			r.CurrentNode, r.Sticky = "n-emu", true
			r.Prefer, r.Avoid = []string{"n-mac", "n-emu"}, []string{"n-native"}
		}, func(w *Weights) { w.Native, w.Emulated, w.DevFallback = 0, 500, 1000 }},
	}
	for _, b := range bonuses {
		for _, reverse := range []bool{false, true} {
			req, w, nodes := tierRequest(), DefaultWeights(), tierFleet()
			if b.req != nil {
				b.req(&req)
			}
			if b.w != nil {
				b.w(&w)
			}
			if reverse {
				slices.Reverse(nodes)
			}
			d := mustPlace(t, req, nodes, Cluster{}, w)
			if diff := cmp.Diff([]string{"n-native", "n-emu", "n-mac"}, order(d)); diff != "" {
				t.Errorf("%s (reverse %v): ranking (-want +got):\n%s", b.name, reverse, diff)
			}
			var tiers []Tier
			for _, c := range d.Candidates {
				tiers = append(tiers, c.Tier)
			}
			if diff := cmp.Diff([]Tier{TierNative, TierEmulated, TierDevFallback}, tiers); diff != "" {
				t.Errorf("%s: tiers (-want +got):\n%s", b.name, diff)
			}
			if chosen(d) != "n-native" {
				t.Errorf("%s (reverse %v): chose %s", b.name, reverse, chosen(d))
			}
		}
	}
}

func TestTierScores(t *testing.T) {
	d := mustPlace(t, tierRequest(), tierFleet(), Cluster{}, DefaultWeights())
	for node, want := range map[string]float64{"n-native": 100, "n-emu": 40, "n-mac": 20} {
		if got := candidate(t, d, node).Score.Execution; got != want {
			t.Errorf("%s execution %v, want %v", node, got, want)
		}
	}
	if c := candidate(t, d, "n-emu"); c.Flags != FlagEmulated || c.Variant != "emulated" {
		t.Errorf("n-emu: variant %s flags %v", c.Variant, c.Flags.Names())
	}
	// An emulated node beats a dev machine but never a native target.
	nodes := tierFleet()[:2]
	if got := chosen(mustPlace(t, tierRequest(), nodes, Cluster{}, DefaultWeights())); got != "n-emu" {
		t.Errorf("emulated vs dev machine: chose %s, want n-emu", got)
	}
}

// TestEmulationOnlyWithTheFlag: without AllowEmulated an emulated-only
// node is rejected, never used automatically, even when nothing else fits.
func TestEmulationOnlyWithTheFlag(t *testing.T) {
	req := tierRequest()
	req.AllowEmulated = false
	d := mustPlace(t, req, tierFleet()[1:2], Cluster{}, DefaultWeights())
	if d.Chosen != nil {
		t.Fatalf("placed on %s without allow_emulated", d.Chosen.Node)
	}
	want := []rej{
		{CodeRequirements, "variant native: `runtime.native`: not advertised"},
		{CodeEmulationNotAllowed, "only emulated route(s) fit (emulated); emulation needs explicit allow_emulated"},
	}
	if diff := cmp.Diff(want, rejs(d.Candidates[0].Rejections)); diff != "" {
		t.Errorf("rejections (-want +got):\n%s", diff)
	}
	// A node where both routes fit uses the native one, allowed or not.
	n := tierFleet()[2]
	n.Capabilities = append(n.Capabilities, Capability{ID: "runtime.container.docker", Provenance: "probed"})
	req.AllowEmulated = true
	req.Variants[0], req.Variants[1] = req.Variants[1], req.Variants[0] // emulated declared first
	d = mustPlace(t, req, []Node{n}, Cluster{}, DefaultWeights())
	if d.Chosen == nil || d.Chosen.Variant != "native" || d.Chosen.Execution != Native {
		t.Errorf("chosen %+v, want the native variant", d.Chosen)
	}
}

// TestPinOverridesScoreAndTierNotConstraints (reference 9.14).
func TestPinOverridesScoreAndTier(t *testing.T) {
	req := tierRequest()
	req.Pin = "n-mac"
	d := mustPlace(t, req, tierFleet(), Cluster{}, DefaultWeights())
	if d.Chosen == nil || d.Chosen.Node != "n-mac" || d.Chosen.Tier != TierDevFallback || d.Chosen.Flags != FlagPinned {
		t.Fatalf("chosen %+v, want n-mac pinned", d.Chosen)
	}
	if diff := cmp.Diff([]string{"n-native", "n-emu", "n-mac"}, order(d)); diff != "" {
		t.Errorf("the pin reordered the ranking (-want +got):\n%s", diff)
	}
	if c := candidate(t, d, "n-mac"); c.Flags != FlagPinned {
		t.Errorf("pinned candidate flags %v", c.Flags.Names())
	}
}

// TestAffinity: prefer and avoid choose among the eligible nodes of the
// best tier; a preferred rejected node is never chosen; avoiding all
// still places.
func TestAffinity(t *testing.T) {
	nodes := []Node{cpuNode("n-a"), cpuNode("n-b"), cpuNode("n-c")}
	nodes[2].Liveness = Dead
	tests := []struct {
		name          string
		prefer, avoid []string
		want          string
		flags         Flags
	}{
		{"none", nil, nil, "n-a", 0},
		{"prefer", []string{"n-b"}, nil, "n-b", FlagAffinity},
		{"prefer first in rank order", []string{"n-b", "n-a"}, nil, "n-a", 0},
		{"prefer rejected", []string{"n-c"}, nil, "n-a", 0},
		{"avoid", nil, []string{"n-a"}, "n-b", FlagAffinity},
		{"avoid all", nil, []string{"n-a", "n-b", "n-c"}, "n-a", 0},
		{"prefer beats avoid", []string{"n-a"}, []string{"n-a"}, "n-a", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := cpuRequest()
			req.Prefer, req.Avoid = tt.prefer, tt.avoid
			d := mustPlace(t, req, nodes, Cluster{}, DefaultWeights())
			if d.Chosen == nil || d.Chosen.Node != tt.want || d.Chosen.Flags != tt.flags {
				t.Errorf("chosen %+v, want %s flags %v", d.Chosen, tt.want, tt.flags.Names())
			}
			if diff := cmp.Diff([]string{"n-a", "n-b", "n-c"}, order(d)); diff != "" {
				t.Errorf("affinity reordered the ranking (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPerf: the budget filters slow nodes; interactive doubles the perf
// weight (pi5 60, seed 60×1000/1100); without a budget a slow node may win
// alone; an unmeasured node is flagged and scores 0 (reference 9.14).
func TestPerf(t *testing.T) {
	measured := func(id string, ms float64) Node {
		n := cpuNode(id)
		n.Capabilities = append(n.Capabilities,
			Capability{ID: "perf.infer.chat", Provenance: "measured", Attrs: []Attr{{"model", grammar.StringValue("q7")}, {AttrValue, grammar.FloatValue(ms)}}},
			// Another model, and a probed figure: neither counts.
			Capability{ID: "perf.infer.chat", Provenance: "measured", Attrs: []Attr{{"model", grammar.StringValue("q1")}, {AttrValue, grammar.FloatValue(1)}}},
			Capability{ID: "perf.infer.chat", Provenance: "probed", Attrs: []Attr{{"model", grammar.StringValue("q7")}, {AttrValue, grammar.FloatValue(1)}}},
		)
		return n
	}
	req := cpuRequest()
	req.Perf = &PerfTarget{ID: "perf.infer.chat", Param: "model", ParamValue: grammar.StringValue("q7"), Better: BetterLower}
	req.Interactive = true
	nodes := []Node{measured("pi5", 1000), measured("seed", 1100), cpuNode("blind")}
	d := mustPlace(t, req, nodes, Cluster{}, DefaultWeights())
	if got := candidate(t, d, "pi5").Score.Perf; got != 60 {
		t.Errorf("pi5 perf %v, want 60", got)
	}
	if got, want := candidate(t, d, "seed").Score.Perf, 60*1000/1100.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("seed perf %v, want %v", got, want)
	}
	if c := candidate(t, d, "blind"); c.Score.Perf != 0 || c.Flags != FlagUnmeasured {
		t.Errorf("blind: perf %v flags %v", c.Score.Perf, c.Flags.Names())
	}
	if chosen(d) != "pi5" {
		t.Errorf("chose %s", chosen(d))
	}

	req.Interactive = false
	if got := candidate(t, mustPlace(t, req, nodes, Cluster{}, DefaultWeights()), "pi5").Score.Perf; got != 30 {
		t.Errorf("batch pi5 perf %v, want 30", got)
	}

	req.Perf.Budget, req.Perf.HasBudget = 1050, true
	d = mustPlace(t, req, nodes, Cluster{}, DefaultWeights())
	if c := candidate(t, d, "seed"); c.Eligible() || c.Rejections[0].Code != CodePerfBudget {
		t.Errorf("seed over budget: %+v", c)
	}
	if candidate(t, d, "blind").Eligible() != true {
		t.Error("an unmeasured node was rejected by the budget")
	}

	req.Perf.HasBudget = false
	if got := chosen(mustPlace(t, req, nodes[1:2], Cluster{}, DefaultWeights())); got != "seed" {
		t.Errorf("slow node alone: chose %q", got)
	}

	// Higher is better: this/best.
	req.Perf.Better = BetterHigher
	d = mustPlace(t, req, nodes[:2], Cluster{}, DefaultWeights())
	if got, want := candidate(t, d, "pi5").Score.Perf, 30*1000/1100.0; math.Abs(got-want) > 1e-9 || chosen(d) != "seed" {
		t.Errorf("higher is better: pi5 perf %v want %v, chose %s", got, want, chosen(d))
	}
}

// TestAccelFit: the smallest sufficient accelerator wins (10 vs
// 10×24/128); CPU work avoids accelerator nodes.
func TestAccelFit(t *testing.T) {
	small, big := chatNode("n-small"), chatNode("n-big")
	big.Capabilities[1].Attrs[0].Value = grammar.IntValue(128 * gib)
	d := mustPlace(t, chatRequest(), []Node{big, small}, Cluster{}, DefaultWeights())
	if candidate(t, d, "n-small").Score.AccelFit != 10 || candidate(t, d, "n-big").Score.AccelFit != 10*24.0/128 {
		t.Errorf("accel_fit small %v big %v", candidate(t, d, "n-small").Score.AccelFit, candidate(t, d, "n-big").Score.AccelFit)
	}
	if chosen(d) != "n-small" || d.Chosen.Accelerator != "accel.gpu.nvidia.0" {
		t.Errorf("chose %+v", d.Chosen)
	}

	// Unknown capacity: full weight.
	big.Capabilities[1].Attrs = []Attr{{AttrMemBytes, grammar.StringValue("lots")}, {"x", grammar.IntValue(1)}}
	req := chatRequest()
	req.Variants[0].Requirements[0].Predicates = nil
	d = mustPlace(t, req, []Node{big, small}, Cluster{}, DefaultWeights())
	if got := candidate(t, d, "n-big").Score.AccelFit; got != 10 {
		t.Errorf("unknown capacity accel_fit %v, want 10", got)
	}

	gpu := cpuNode("n-gpu")
	gpu.Capabilities = append(gpu.Capabilities, Capability{ID: "accel.gpu.nvidia.0", Provenance: "probed"})
	d = mustPlace(t, cpuRequest(), []Node{gpu, cpuNode("n-plain")}, Cluster{}, DefaultWeights())
	if chosen(d) != "n-plain" || candidate(t, d, "n-gpu").Score.AccelFit != 0 || candidate(t, d, "n-plain").Score.AccelFit != 10 {
		t.Errorf("CPU work: chose %s; accel_fit gpu %v plain %v", chosen(d),
			candidate(t, d, "n-gpu").Score.AccelFit, candidate(t, d, "n-plain").Score.AccelFit)
	}
}

// TestLocality moves the choice within a tier (a tie breaks by node id)
// but never across tiers.
func TestLocality(t *testing.T) {
	a, b := cpuNode("n-a"), cpuNode("n-b")
	b.Capabilities = append(b.Capabilities, Capability{ID: "label.rack.r2", Provenance: "claimed"})
	req := cpuRequest()
	if chosen(mustPlace(t, req, []Node{b, a}, Cluster{}, DefaultWeights())) != "n-a" {
		t.Error("a tie did not break by node id")
	}
	req.Preferences = []Preference{{Requirement{Selector: "label.rack.r2"}, 5}, {Requirement{Selector: "label.rack"}, 2.5}}
	d := mustPlace(t, req, []Node{a, b}, Cluster{}, DefaultWeights())
	if chosen(d) != "n-b" || candidate(t, d, "n-b").Score.Locality != 7.5 || candidate(t, d, "n-a").Score.Locality != 0 {
		t.Errorf("locality: chose %s, n-b locality %v", chosen(d), candidate(t, d, "n-b").Score.Locality)
	}
}

// TestLoad: load headroom breaks ties; a node without capabilities has
// unknown load, flagged and scored 0.
func TestLoad(t *testing.T) {
	a, b := cpuNode("n-a"), cpuNode("n-b")
	a.Capabilities = append(a.Capabilities, Capability{ID: "runtime.process", Provenance: "probed", State: "busy"},
		Capability{ID: "runtime.llamacpp", Provenance: "probed", State: "reserved"},
		Capability{ID: "label.x", Provenance: "claimed", State: "degraded"})
	d := mustPlace(t, cpuRequest(), []Node{a, b}, Cluster{}, DefaultWeights())
	if chosen(d) != "n-b" || candidate(t, d, "n-a").Score.Load != 5 || candidate(t, d, "n-b").Score.Load != 10 {
		t.Errorf("load: chose %s, a %v b %v", chosen(d), candidate(t, d, "n-a").Score.Load, candidate(t, d, "n-b").Score.Load)
	}
	req := cpuRequest()
	req.Requirements = nil
	req.Variants[0].Resources = Resources{}
	empty := Node{ID: "n-empty", Trust: TrustPaired, Liveness: Alive, Gate: VerdictAllow}
	d = mustPlace(t, req, []Node{empty}, Cluster{}, DefaultWeights())
	if c := candidate(t, d, "n-empty"); c.Score.Load != 0 || c.Flags != FlagLoadUnknown {
		t.Errorf("empty node: load %v flags %v", c.Score.Load, c.Flags.Names())
	}
}

// TestStickiness keeps a near-tie current node; sticky resists a much
// better node.
func TestStickiness(t *testing.T) {
	a, b := cpuNode("n-a"), cpuNode("n-b")
	b.Capabilities = append(b.Capabilities, Capability{ID: "runtime.process", Provenance: "probed", State: "busy"})
	req := cpuRequest()
	req.CurrentNode = "n-b"
	d := mustPlace(t, req, []Node{a, b}, Cluster{}, DefaultWeights())
	if chosen(d) != "n-b" || candidate(t, d, "n-b").Score.Stickiness != 15 {
		t.Errorf("near tie: chose %s", chosen(d))
	}
	req.Preferences = []Preference{{Requirement{Selector: "os.linux", Predicates: []Predicate{{"fast", "eq", grammar.BoolValue(true)}}}, 500}}
	a.Capabilities[0].Attrs = []Attr{{"fast", grammar.BoolValue(true)}}
	if got := chosen(mustPlace(t, req, []Node{a, b}, Cluster{}, DefaultWeights())); got != "n-a" {
		t.Errorf("much better node: chose %s", got)
	}
	req.Sticky = true
	d = mustPlace(t, req, []Node{a, b}, Cluster{}, DefaultWeights())
	if chosen(d) != "n-b" || candidate(t, d, "n-b").Score.Stickiness != 1000 {
		t.Errorf("sticky: chose %s", chosen(d))
	}
}

// TestRankingIndependentOfOrder: every permutation of the nodes, and of
// each node's capabilities, gives the same decision.
func TestRankingIndependentOfOrder(t *testing.T) {
	nodes := append(tierFleet(), cpuNode("n-x"))
	nodes[3].Capabilities = append(nodes[3].Capabilities, Capability{ID: "runtime.native", Provenance: "probed", State: "busy"})
	want := mustPlace(t, tierRequest(), nodes, Cluster{}, DefaultWeights())
	perms := [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}}
	for _, p := range perms {
		var give []Node
		for _, i := range p {
			n := nodes[i]
			n.Capabilities = slices.Clone(n.Capabilities)
			slices.Reverse(n.Capabilities)
			give = append(give, n)
		}
		got := mustPlace(t, tierRequest(), give, Cluster{}, DefaultWeights())
		if diff := cmp.Diff(want, got, rejText); diff != "" {
			t.Errorf("order %v (-want +got):\n%s", p, diff)
		}
	}
}

// TestPlaceDoesNotModifyItsInput: Place reads its arguments only.
func TestPlaceDoesNotModifyItsInput(t *testing.T) {
	req := chatRequest()
	nodes := []Node{chatNode("n-b"), chatNode("n-a"), cpuNode("n-c")}
	wantReq, wantNodes := chatRequest(), []Node{chatNode("n-b"), chatNode("n-a"), cpuNode("n-c")}
	mustPlace(t, req, nodes, Cluster{}, DefaultWeights())
	if diff := cmp.Diff(wantReq, req, valueEqual); diff != "" {
		t.Errorf("request modified (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantNodes, nodes, valueEqual); diff != "" {
		t.Errorf("nodes modified (-want +got):\n%s", diff)
	}
}
