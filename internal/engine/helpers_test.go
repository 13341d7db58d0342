package engine

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeld/nodeld/internal/grammar"
)

const gib = 1 << 30

// chatRequest is a workload that places on chatNode: Linux, one exclusive
// GPU with at least 8 GiB, 2 GiB host and 6 GiB VRAM.
func chatRequest() Request {
	return Request{
		Kind: "inference", Name: "chat-7b",
		Requirements: []Requirement{{Selector: "os.linux"}},
		Variants: []Variant{{
			Name: "cuda",
			Requirements: []Requirement{{
				Selector: "accel.gpu", Exclusive: true,
				Predicates: []Predicate{{Attr: AttrMemBytes, Op: "gte", Value: grammar.IntValue(8 * gib)}},
			}},
			Resources: Resources{HostBytes: 2 * gib, AccelBytes: 6 * gib},
		}},
		MinTrust: TrustPaired,
	}
}

// chatNode is an alive, paired Linux node with one free 24 GiB GPU that
// the gate allows.
func chatNode(id string) Node {
	return Node{
		ID: id, Trust: TrustPaired, Liveness: Alive, Gate: VerdictAllow,
		Capabilities: []Capability{
			{ID: "os.linux", Provenance: "probed"},
			{ID: "accel.gpu.nvidia.0", Provenance: "probed", Exclusive: true,
				Attrs: []Attr{{AttrMemBytes, grammar.IntValue(24 * gib)}}},
		},
		Memory: Memory{HostFree: 16 * gib, VRAMFree: []uint64{20 * gib}},
	}
}

// cpuRequest needs nothing but Linux and 1 GiB of host memory.
func cpuRequest() Request {
	return Request{
		Kind: "service", Name: "echo",
		Requirements: []Requirement{{Selector: "os.linux"}},
		Variants:     []Variant{{Name: "default", Resources: Resources{HostBytes: gib}}},
		MinTrust:     TrustPaired,
	}
}

// cpuNode is an alive, paired Linux node without accelerators.
func cpuNode(id string) Node {
	return Node{
		ID: id, Trust: TrustPaired, Liveness: Alive, Gate: VerdictAllow,
		Capabilities: []Capability{{ID: "os.linux", Provenance: "probed"}},
		Memory:       Memory{HostFree: 8 * gib},
	}
}

// mustPlace places req, and checks that the same nodes given with their
// Profiles decide the same (when they were given without).
func mustPlace(t *testing.T, req Request, nodes []Node, cl Cluster, w Weights) Decision {
	t.Helper()
	d, err := Place(req, nodes, cl, w)
	if err != nil {
		t.Fatalf("Place: %v", err)
	}
	if slices.ContainsFunc(nodes, func(n Node) bool { return n.Profile != nil }) {
		return d
	}
	pd, err := Place(req, prepared(NewSymbols(), nodes), cl, w)
	if err != nil {
		t.Fatalf("Place, prepared: %v", err)
	}
	if diff := cmp.Diff(d, pd, rejText); diff != "" {
		t.Fatalf("prepared nodes decide otherwise (-unprepared +prepared):\n%s", diff)
	}
	return d
}

// prepared returns the nodes with their Profiles, prepared by syms, and
// without the capabilities and memory they were prepared from.
func prepared(syms *Symbols, nodes []Node) []Node {
	out := make([]Node, len(nodes))
	for i, n := range nodes {
		n.Profile = syms.Prepare(n.Capabilities, n.Memory)
		n.Capabilities, n.Memory = nil, Memory{}
		out[i] = n
	}
	return out
}

// compacted returns the nodes with their Profiles compacted (Compact).
func compacted(nodes []Node) []Node {
	prs := make([]*Profile, len(nodes))
	for i := range nodes {
		prs[i] = nodes[i].Profile
	}
	prs = Compact(prs)
	out := slices.Clone(nodes)
	for i := range out {
		out[i].Profile = prs[i]
	}
	return out
}

// rej is a Rejection as text, for comparisons.
type rej struct {
	Code   Code
	Detail string
}

func rejs(rs []Rejection) []rej {
	var out []rej
	for _, r := range rs {
		out = append(out, rej{r.Code, r.Detail()})
	}
	return out
}

// candText is a Candidate as cmp compares it: what its methods give.
type candText struct {
	Node       string
	Rejections []Rejection
	Variant    string
	Tier       Tier
	Score      Score
	Flags      Flags
	Assigned   [][]string
}

// rejText lets cmp compare Rejections by code and text, and Candidates
// by what they assigned.
var rejText = cmp.Options{
	cmp.Transformer("text", func(r Rejection) rej { return rej{r.Code, r.Detail()} }),
	cmp.Transformer("assigned", func(c Candidate) candText {
		return candText{c.Node, c.Rejections, c.Variant, c.Tier, c.Score, c.Flags, c.Assigned()}
	}),
}

// order returns the node ids of the candidates, eligible ones first, as
// ranked.
func order(d Decision) []string {
	var ids []string
	for _, c := range d.Candidates {
		ids = append(ids, c.Node)
	}
	return ids
}

func chosen(d Decision) string {
	if d.Chosen == nil {
		return ""
	}
	return d.Chosen.Node
}

func candidate(t *testing.T, d Decision, node string) Candidate {
	t.Helper()
	for _, c := range d.Candidates {
		if c.Node == node {
			return c
		}
	}
	t.Fatalf("no candidate %s", node)
	return Candidate{}
}

// valueEqual lets cmp compare grammar Values, whose fields are
// unexported, exactly.
var valueEqual = cmp.Comparer(func(a, b grammar.Value) bool { return a.Equal(b) })
