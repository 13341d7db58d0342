package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeld/nodeld/internal/grammar"
)

// TestEachConstraintAlone breaks one thing at a time on a node that is
// otherwise eligible: the node is rejected by that constraint alone, with
// that exact detail (reference 9.14).
func TestEachConstraintAlone(t *testing.T) {
	tests := []struct {
		name    string
		req     func(*Request)
		node    func(*Node)
		cluster Cluster
		want    []rej
	}{
		{
			name: "dead",
			node: func(n *Node) { n.Liveness = Dead },
			want: []rej{{CodeLiveness, "node is dead"}},
		},
		{
			name: "suspect",
			node: func(n *Node) { n.Liveness = Suspect },
			want: []rej{{CodeLiveness, "node is suspect"}},
		},
		{
			name: "liveness unknown",
			node: func(n *Node) { n.Liveness = LivenessUnknown },
			want: []rej{{CodeLiveness, "node liveness is unknown"}},
		},
		{
			name: "expired facts",
			node: func(n *Node) { n.FactsExpired = true },
			want: []rej{{CodeFactsExpired, "facts expired"}},
		},
		{
			name: "discovered tier",
			node: func(n *Node) { n.Trust = TrustDiscovered },
			want: []rej{{CodeTrust, "tier discovered below required paired"}},
		},
		{
			name: "no tier",
			node: func(n *Node) { n.Trust = TrustNone },
			want: []rej{{CodeTrust, "tier none below required paired"}},
		},
		{
			name: "pinned required",
			req:  func(r *Request) { r.MinTrust = TrustPinned },
			want: []rej{{CodeTrust, "tier paired below required pinned"}},
		},
		{
			name:    "node revoked",
			cluster: Cluster{RevokedNodes: []string{"n-a"}},
			want:    []rej{{CodeNodeRevoked, "node is revoked"}},
		},
		{
			name:    "package revoked",
			req:     func(r *Request) { r.RevocableRefs = []string{"pkg:chat", "key:abc"} },
			cluster: Cluster{RevokedRefs: []string{"key:abc", "other"}},
			want:    []rej{{CodeWorkloadRevoked, "workload ref key:abc is revoked"}},
		},
		{
			name: "we exclude",
			req:  func(r *Request) { r.Excludes = []string{"gpu-hog"} },
			node: func(n *Node) {
				n.Instances = []Instance{{Kind: "inference", Name: "train", Labels: []string{"batch", "gpu-hog"}}}
			},
			want: []rej{{CodeCoResidency, "instance inference/train has label gpu-hog, which this workload excludes"}},
		},
		{
			name: "they exclude",
			req:  func(r *Request) { r.Labels = []string{"chat"} },
			node: func(n *Node) {
				n.Instances = []Instance{{Kind: "service", Name: "quiet", Excludes: []string{"chat"}}}
			},
			want: []rej{{CodeCoResidency, "instance service/quiet excludes label chat of this workload"}},
		},
		{
			name: "vram short",
			node: func(n *Node) { n.Memory.VRAMFree = []uint64{2 * gib, 3 * gib} },
			want: []rej{{CodeMemory, "variant cuda: vram pool: need 6442450944 bytes, free 5368709120 bytes"}},
		},
		{
			name: "system memory short",
			node: func(n *Node) { n.Memory.HostFree = gib },
			want: []rej{{CodeMemory, "variant cuda: system pool: need 2147483648 bytes, free 1073741824 bytes"}},
		},
		{
			name: "no memory figures",
			node: func(n *Node) { n.Memory = Memory{} },
			want: []rej{
				{CodeMemory, "variant cuda: system pool: need 2147483648 bytes, free 0 bytes"},
				{CodeMemory, "variant cuda: vram pool: need 6442450944 bytes, free 0 bytes"},
			},
		},
		{
			name: "unified pool short",
			node: func(n *Node) { n.Memory = Memory{Unified: true, HostFree: 7 * gib, VRAMFree: []uint64{64 * gib}} },
			want: []rej{{CodeMemory, "variant cuda: unified pool: need 8589934592 bytes, free 7516192768 bytes"}},
		},
		{
			name: "pending reservation",
			node: func(n *Node) { n.Pending = []Resources{{AccelBytes: 10 * gib}, {AccelBytes: 5 * gib}} },
			want: []rej{{CodeMemory, "variant cuda: vram pool: need 22548578304 bytes (16106127360 pending), free 21474836480 bytes"}},
		},
		{
			name: "missing capability",
			node: func(n *Node) { n.Capabilities = n.Capabilities[1:] },
			want: []rej{{CodeRequirements, "`os.linux`: not advertised"}},
		},
		{
			name: "dot boundary",
			node: func(n *Node) { n.Capabilities[1].ID = "accel.gpux.0" },
			want: []rej{{CodeRequirements, "variant cuda: `accel.gpu`: not advertised"}},
		},
		{
			name: "requirement provenance",
			req:  func(r *Request) { r.Requirements[0].MinProvenance = "measured" },
			want: []rej{{CodeProvenance, "`os.linux`: provenance probed below measured"}},
		},
		{
			name: "provenance floor",
			req:  func(r *Request) { r.MinProvenance = "measured" },
			node: func(n *Node) { n.Capabilities[0].Provenance = "measured" },
			want: []rej{{CodeProvenance, "variant cuda: `accel.gpu`: provenance probed below measured"}},
		},
		{
			name: "predicate",
			node: func(n *Node) { n.Capabilities[1].Attrs[0].Value = grammar.IntValue(4 * gib) },
			want: []rej{{CodeRequirements, "variant cuda: `accel.gpu`: predicate `mem_bytes gte 8589934592` failed"}},
		},
		{
			name: "missing attribute",
			node: func(n *Node) { n.Capabilities[1].Attrs = nil },
			want: []rej{{CodeRequirements, "variant cuda: `accel.gpu`: predicate `mem_bytes gte 8589934592` failed"}},
		},
		{
			name: "busy exclusive accelerator never stolen",
			node: func(n *Node) { n.Capabilities[1].State = "busy" },
			want: []rej{{CodeRequirements, "variant cuda: `accel.gpu`: unavailable (busy)"}},
		},
		{
			name: "reserved",
			node: func(n *Node) { n.Capabilities[1].State = "reserved" },
			want: []rej{{CodeRequirements, "variant cuda: `accel.gpu`: unavailable (reserved)"}},
		},
		{
			name: "degraded",
			node: func(n *Node) { n.Capabilities[0].State = "degraded" },
			want: []rej{{CodeRequirements, "`os.linux`: unavailable (degraded)"}},
		},
		{
			name: "unknown state",
			node: func(n *Node) { n.Capabilities[0].State = "asleep" },
			want: []rej{{CodeRequirements, "`os.linux`: unavailable (asleep)"}},
		},
		{
			name: "count",
			req:  func(r *Request) { r.Variants[0].Requirements[0].Count = 2 },
			want: []rej{{CodeRequirements, "variant cuda: `accel.gpu`: 1 usable, need 2"}},
		},
		{
			name: "contended exclusive",
			req: func(r *Request) {
				r.Variants[0].Requirements = append(r.Variants[0].Requirements, Requirement{Selector: "accel", Exclusive: true})
			},
			want: []rej{
				{CodeRequirements, "variant cuda: `accel.gpu`: contended (need 1 exclusive)"},
				{CodeRequirements, "variant cuda: `accel`: contended (need 1 exclusive)"},
			},
		},
		{
			name: "emulation not allowed",
			req: func(r *Request) {
				r.Variants[0].Execution = Emulated
			},
			want: []rej{{CodeEmulationNotAllowed, "only emulated route(s) fit (cuda); emulation needs explicit allow_emulated"}},
		},
		{
			name: "gate deny",
			node: func(n *Node) { n.Gate, n.GateReason = VerdictDeny, "rule WORKLOAD-DEFAULT-DENY" },
			want: []rej{{CodeGate, "workload.place denied: rule WORKLOAD-DEFAULT-DENY"}},
		},
		{
			name: "no verdict for node",
			node: func(n *Node) { n.Gate = VerdictNone },
			want: []rej{{CodeGate, "no gate decision for this node"}},
		},
		{
			name: "perf budget",
			req: func(r *Request) {
				r.Perf = &PerfTarget{ID: "perf.infer.chat", Better: BetterLower, Budget: 100, HasBudget: true}
			},
			node: func(n *Node) {
				n.Capabilities = append(n.Capabilities, Capability{ID: "perf.infer.chat", Provenance: "measured",
					Attrs: []Attr{{AttrValue, grammar.FloatValue(120.5)}}})
			},
			want: []rej{{CodePerfBudget, "measured perf.infer.chat 120.5 misses budget 100"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, n := chatRequest(), chatNode("n-a")
			if tt.req != nil {
				tt.req(&req)
			}
			if tt.node != nil {
				tt.node(&n)
			}
			d := mustPlace(t, req, []Node{n}, tt.cluster, DefaultWeights())
			if d.Chosen != nil {
				t.Errorf("placed on %s, want rejected", d.Chosen.Node)
			}
			if diff := cmp.Diff(tt.want, rejs(d.Candidates[0].Rejections)); diff != "" {
				t.Errorf("rejections (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBaselinesPlace checks that the fixtures the constraint table breaks
// do place, and how.
func TestBaselinesPlace(t *testing.T) {
	d := mustPlace(t, chatRequest(), []Node{chatNode("n-a")}, Cluster{}, DefaultWeights())
	want := &Placement{
		Node: "n-a", Variant: "cuda", Execution: Native, Tier: TierNative, Accelerator: "accel.gpu.nvidia.0",
		Score: Score{Execution: 100, AccelFit: 10, Load: 10, Total: 120},
	}
	if diff := cmp.Diff(want, d.Chosen); diff != "" {
		t.Errorf("chat placement (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"os.linux"}, {"accel.gpu.nvidia.0"}}, d.Candidates[0].Assigned()); diff != "" {
		t.Errorf("assigned (-want +got):\n%s", diff)
	}
	if got := chosen(mustPlace(t, cpuRequest(), []Node{cpuNode("n-b")}, Cluster{}, DefaultWeights())); got != "n-b" {
		t.Errorf("cpu request placed on %q, want n-b", got)
	}
}

// TestAllFailuresRecorded: a node failing many constraints reports each,
// in evaluation order, not only the first.
func TestAllFailuresRecorded(t *testing.T) {
	req := chatRequest()
	req.RevocableRefs = []string{"pkg"}
	req.Excludes = []string{"noisy"}
	n := chatNode("n-a")
	n.Liveness, n.FactsExpired, n.Trust = Dead, true, TrustDiscovered
	n.Instances = []Instance{{Kind: "service", Name: "x", Labels: []string{"noisy"}}}
	n.Capabilities = nil
	n.Memory = Memory{}
	n.Gate = VerdictDeny
	d := mustPlace(t, req, []Node{n}, Cluster{RevokedNodes: []string{"n-a"}, RevokedRefs: []string{"pkg"}}, DefaultWeights())
	var codes []Code
	for _, r := range d.Candidates[0].Rejections {
		codes = append(codes, r.Code)
	}
	want := []Code{CodeNodeRevoked, CodeLiveness, CodeFactsExpired, CodeTrust, CodeWorkloadRevoked, CodeCoResidency,
		CodeRequirements, CodeRequirements, CodeMemory, CodeMemory, CodeGate}
	if diff := cmp.Diff(want, codes); diff != "" {
		t.Errorf("codes (-want +got):\n%s", diff)
	}
}

// TestOwnInstanceIsNotANeighbour: the request's own (kind, name) instance
// does not trigger co-residency, but another workload with the same
// labels does.
func TestOwnInstanceIsNotANeighbour(t *testing.T) {
	req := chatRequest()
	req.Labels, req.Excludes = []string{"chat"}, []string{"chat"}
	n := chatNode("n-a")
	n.Instances = []Instance{{Kind: "inference", Name: "chat-7b", Labels: []string{"chat"}, Excludes: []string{"chat"}}}
	if got := chosen(mustPlace(t, req, []Node{n}, Cluster{}, DefaultWeights())); got != "n-a" {
		t.Fatalf("own instance blocked placement: chosen %q", got)
	}
	n.Instances[0].Name = "chat-13b"
	d := mustPlace(t, req, []Node{n}, Cluster{}, DefaultWeights())
	if d.Chosen != nil || d.Candidates[0].Rejections[0].Code != CodeCoResidency {
		t.Errorf("another chat instance did not conflict: %+v", d.Candidates[0])
	}
}

// TestMemoryPools: unified memory is one pool for host and accelerator
// demand together; discrete VRAM is summed over GPUs and separate from
// system memory; pending reservations count against the pool they draw
// on (reference 9.14).
func TestMemoryPools(t *testing.T) {
	tests := []struct {
		name    string
		mem     Memory
		pending []Resources
		fits    bool
	}{
		{"discrete fits", Memory{HostFree: 2 * gib, VRAMFree: []uint64{6 * gib}}, nil, true},
		{"vram summed over gpus", Memory{HostFree: 2 * gib, VRAMFree: []uint64{3 * gib, 3 * gib}}, nil, true},
		{"host memory does not stand in for vram", Memory{HostFree: 100 * gib}, nil, false},
		{"unified holds both", Memory{Unified: true, HostFree: 8 * gib}, nil, true},
		{"unified needs both together", Memory{Unified: true, HostFree: 8*gib - 1}, nil, false},
		{"unified ignores vram figures", Memory{Unified: true, HostFree: 4 * gib, VRAMFree: []uint64{80 * gib}}, nil, false},
		{"pending host", Memory{HostFree: 3 * gib, VRAMFree: []uint64{6 * gib}}, []Resources{{HostBytes: gib}}, true},
		{"pending host over", Memory{HostFree: 3 * gib, VRAMFree: []uint64{6 * gib}}, []Resources{{HostBytes: gib + 1}}, false},
		{"pending accel on unified", Memory{Unified: true, HostFree: 9 * gib}, []Resources{{AccelBytes: gib + 1}}, false},
		{"huge pending saturates", Memory{HostFree: 1<<64 - 1, VRAMFree: []uint64{1<<64 - 1}}, []Resources{{HostBytes: 1<<64 - 1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := chatNode("n-a")
			n.Memory, n.Pending = tt.mem, tt.pending
			d := mustPlace(t, chatRequest(), []Node{n}, Cluster{}, DefaultWeights())
			if got := d.Chosen != nil; got != tt.fits {
				t.Errorf("placed = %v, want %v; rejections %v", got, tt.fits, d.Candidates[0].Rejections)
			}
			for _, r := range d.Candidates[0].Rejections {
				if r.Code != CodeMemory {
					t.Errorf("unexpected rejection %v", r)
				}
			}
		})
	}
	// Zero demand needs no memory at all.
	req := cpuRequest()
	req.Variants[0].Resources = Resources{}
	n := cpuNode("n-a")
	n.Memory = Memory{}
	if chosen(mustPlace(t, req, []Node{n}, Cluster{}, DefaultWeights())) != "n-a" {
		t.Error("a workload with no memory demand was rejected for memory")
	}
}

// TestMemoryIsPerVariant: demand is per route; a variant that fits
// requirements but not memory gives way to the next that fits both.
func TestMemoryIsPerVariant(t *testing.T) {
	req := chatRequest()
	req.Variants[0].Resources.AccelBytes = 40 * gib
	req.Variants = append(req.Variants, Variant{
		Name:         "cuda-q4",
		Requirements: req.Variants[0].Requirements,
		Resources:    Resources{HostBytes: gib, AccelBytes: 4 * gib},
	})
	d := mustPlace(t, req, []Node{chatNode("n-a")}, Cluster{}, DefaultWeights())
	if d.Chosen == nil || d.Chosen.Variant != "cuda-q4" {
		t.Fatalf("chosen %+v, want cuda-q4", d.Chosen)
	}
	// When neither fits, both are explained.
	n := chatNode("n-a")
	n.Memory.VRAMFree = []uint64{gib}
	d = mustPlace(t, req, []Node{n}, Cluster{}, DefaultWeights())
	want := []rej{
		{CodeMemory, "variant cuda: vram pool: need 42949672960 bytes, free 1073741824 bytes"},
		{CodeMemory, "variant cuda-q4: vram pool: need 4294967296 bytes, free 1073741824 bytes"},
	}
	if diff := cmp.Diff(want, rejs(d.Candidates[0].Rejections)); diff != "" {
		t.Errorf("rejections (-want +got):\n%s", diff)
	}
}

// TestRequirementMatching covers the rules of a single requirement:
// predicates (loose numeric equality, in, has), busy shared use, counts,
// and which filter a failure is reported at.
func TestRequirementMatching(t *testing.T) {
	gpu := func(id string, attrs ...Attr) Capability {
		return Capability{ID: id, Provenance: "probed", Attrs: attrs}
	}
	tests := []struct {
		name string
		req  Requirement
		caps []Capability
		want []rej // nil: matches
	}{
		{"eq int float", Requirement{Selector: "cpu.cores", Predicates: []Predicate{{"count", "eq", grammar.FloatValue(8)}}},
			[]Capability{gpu("cpu.cores", Attr{"count", grammar.IntValue(8)})}, nil},
		{"eq string", Requirement{Selector: "cpu.arch", Predicates: []Predicate{{"name", "eq", grammar.StringValue("amd64")}}},
			[]Capability{gpu("cpu.arch.x", Attr{"name", grammar.StringValue("arm64")})},
			[]rej{{CodeRequirements, "`cpu.arch`: predicate `name eq amd64` failed"}}},
		{"eq bool", Requirement{Selector: "accel.gpu", Predicates: []Predicate{{"cuda", "eq", grammar.BoolValue(true)}}},
			[]Capability{gpu("accel.gpu.0", Attr{"cuda", grammar.BoolValue(true)})}, nil},
		{"eq is typed", Requirement{Selector: "accel.gpu", Predicates: []Predicate{{"cuda", "eq", grammar.StringValue("true")}}},
			[]Capability{gpu("accel.gpu.0", Attr{"cuda", grammar.BoolValue(true)})},
			[]rej{{CodeRequirements, "`accel.gpu`: predicate `cuda eq true` failed"}}},
		{"lte", Requirement{Selector: "net.rtt", Predicates: []Predicate{{"ms", "lte", grammar.IntValue(5)}}},
			[]Capability{gpu("net.rtt.lan", Attr{"ms", grammar.FloatValue(4.5)})}, nil},
		{"gte on string fails", Requirement{Selector: "net.rtt", Predicates: []Predicate{{"ms", "gte", grammar.IntValue(1)}}},
			[]Capability{gpu("net.rtt.lan", Attr{"ms", grammar.StringValue("4")})},
			[]rej{{CodeRequirements, "`net.rtt`: predicate `ms gte 1` failed"}}},
		{"in", Requirement{Selector: "cpu.arch", Predicates: []Predicate{{"name", "in", grammar.ListValue(grammar.StringValue("amd64"), grammar.StringValue("arm64"))}}},
			[]Capability{gpu("cpu.arch.x", Attr{"name", grammar.StringValue("arm64")})}, nil},
		{"has", Requirement{Selector: "runtime.container", Predicates: []Predicate{{"arches_native", "has", grammar.StringValue("arm64")}}},
			[]Capability{gpu("runtime.container.docker", Attr{"arches_native", grammar.ListValue(grammar.StringValue("amd64"), grammar.StringValue("arm64"))})}, nil},
		{"has on scalar fails", Requirement{Selector: "runtime.container", Predicates: []Predicate{{"arches_native", "has", grammar.StringValue("arm64")}}},
			[]Capability{gpu("runtime.container.docker", Attr{"arches_native", grammar.StringValue("arm64")})},
			[]rej{{CodeRequirements, "`runtime.container`: predicate `arches_native has arm64` failed"}}},
		{"later predicate named when it empties the set", Requirement{Selector: "accel.gpu", Count: 1, Predicates: []Predicate{
			{"vendor", "eq", grammar.StringValue("nvidia")}, {AttrMemBytes, "gte", grammar.IntValue(16)}}},
			[]Capability{gpu("accel.gpu.0", Attr{"vendor", grammar.StringValue("amd")}, Attr{AttrMemBytes, grammar.IntValue(32)}),
				gpu("accel.gpu.1", Attr{"vendor", grammar.StringValue("nvidia")}, Attr{AttrMemBytes, grammar.IntValue(8)})},
			[]rej{{CodeRequirements, "`accel.gpu`: predicate `mem_bytes gte 16` failed"}}},
		{"busy shared is usable", Requirement{Selector: "runtime.llamacpp"},
			[]Capability{{ID: "runtime.llamacpp", Provenance: "probed", State: "busy"}}, nil},
		{"busy exclusive capability is not", Requirement{Selector: "runtime.llamacpp"},
			[]Capability{{ID: "runtime.llamacpp", Provenance: "probed", State: "busy", Exclusive: true}},
			[]rej{{CodeRequirements, "`runtime.llamacpp`: unavailable (busy)"}}},
		{"count over several", Requirement{Selector: "accel.gpu", Count: 2},
			[]Capability{gpu("accel.gpu.0"), gpu("accel.gpu.1")}, nil},
		{"count short after states", Requirement{Selector: "accel.gpu", Count: 2, Exclusive: true},
			[]Capability{gpu("accel.gpu.0"), {ID: "accel.gpu.1", State: "busy"}},
			[]rej{{CodeRequirements, "`accel.gpu`: 1 usable, need 2"}}},
		{"unknown provenance meets no minimum", Requirement{Selector: "os.linux", MinProvenance: "claimed"},
			[]Capability{{ID: "os.linux", Provenance: "rumoured"}},
			[]rej{{CodeProvenance, "`os.linux`: provenance unknown below claimed"}}},
		{"claimed tsu fails until measured", Requirement{Selector: "accel.tsu", MinProvenance: "measured"},
			[]Capability{{ID: "accel.tsu.x1", Provenance: "claimed"}},
			[]rej{{CodeProvenance, "`accel.tsu`: provenance claimed below measured"}}},
		{"measured tsu passes", Requirement{Selector: "accel.tsu", MinProvenance: "measured"},
			[]Capability{{ID: "accel.tsu.x1", Provenance: "measured"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := Request{Kind: "service", Name: "w", MinTrust: TrustPaired,
				Variants: []Variant{{Name: "only", Requirements: []Requirement{tt.req}}}}
			n := Node{ID: "n-a", Trust: TrustPaired, Liveness: Alive, Gate: VerdictAllow, Capabilities: tt.caps}
			d := mustPlace(t, req, []Node{n}, Cluster{}, DefaultWeights())
			var want []rej
			for _, r := range tt.want {
				r.Detail = "variant only: " + r.Detail
				want = append(want, r)
			}
			if diff := cmp.Diff(want, rejs(d.Candidates[0].Rejections)); diff != "" {
				t.Errorf("rejections (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSharedRecordsKeepNodeDetails: nodes whose records are alike share
// their matching (one record, matched once per decision), yet each
// rejection names its own node's capability: here an unknown state, which
// every such record shares, and a capability at another position.
func TestSharedRecordsKeepNodeDetails(t *testing.T) {
	req := Request{Kind: "service", Name: "w", MinTrust: TrustPaired,
		Variants: []Variant{{Name: "only", Requirements: []Requirement{{Selector: "runtime.x"}}}}}
	a, b := cpuNode("n-a"), cpuNode("n-b")
	a.Capabilities = append(a.Capabilities, Capability{ID: "runtime.x", Provenance: "probed", State: "asleep"})
	b.Capabilities = []Capability{{ID: "runtime.x", Provenance: "probed", State: "frozen"}, {ID: "os.linux", Provenance: "probed"}}
	d := mustPlace(t, req, []Node{a, b}, Cluster{}, DefaultWeights())
	for node, want := range map[string]string{"n-a": "asleep", "n-b": "frozen"} {
		got := rejs(candidate(t, d, node).Rejections)
		if diff := cmp.Diff([]rej{{CodeRequirements, "variant only: `runtime.x`: unavailable (" + want + ")"}}, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", node, diff)
		}
	}
}
