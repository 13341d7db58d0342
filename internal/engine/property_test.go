package engine

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeld/nodeld/internal/grammar"
	"pgregory.net/rapid"
)

// Generated clusters draw from a small vocabulary so that requirements,
// exclusivity, memory, labels and tiers collide often.
var (
	genCapIDs = []string{
		"os.linux", "runtime.native", "runtime.container", "cpu.cores",
		"accel.gpu.0", "accel.gpu.1", "accel.gpu.2", "accel.npu.0",
		"label.zone.a", "label.zone.b", "node.class.dev-mac", "perf.infer.chat",
	}
	genSelectors = []string{"os.linux", "runtime", "runtime.native", "runtime.container", "cpu.cores",
		"accel", "accel.gpu", "accel.npu", "label.zone", "label.zone.a"}
	genProvenances = []string{"probed", "probed", "measured", "claimed", "", "rumoured"}
	genMinimums    = []string{"", "", "", "claimed", "probed", "measured"}
	genStates      = []string{"", "available", "available", "available", "busy", "reserved", "degraded"}
	genLabels      = []string{"a", "b", "c", "d", "e"}
	genBytes       = []uint64{0, gib, 4 * gib, 8 * gib, 24 * gib}
	genFree        = []uint64{0, 4 * gib, 8 * gib, 24 * gib, 64 * gib, 64 * gib}
	genDemand      = []uint64{0, 0, gib, 4 * gib, 8 * gib}
)

func genCapability(id string) *rapid.Generator[Capability] {
	return rapid.Custom(func(t *rapid.T) Capability {
		c := Capability{
			ID:         id,
			Provenance: rapid.SampledFrom(genProvenances).Draw(t, "provenance"),
			State:      rapid.SampledFrom(genStates).Draw(t, "state"),
			Exclusive:  rapid.Bool().Draw(t, "exclusive"),
		}
		if rapid.Bool().Draw(t, "has_mem") {
			c.Attrs = append(c.Attrs, Attr{AttrMemBytes, grammar.IntValue(int64(rapid.SampledFrom(genBytes).Draw(t, "mem_bytes")))})
		}
		if rapid.Bool().Draw(t, "has_value") {
			c.Attrs = append(c.Attrs, Attr{AttrValue, grammar.FloatValue(float64(rapid.IntRange(0, 200).Draw(t, "value")))})
		}
		return c
	})
}

func genNode(id string) *rapid.Generator[Node] {
	return rapid.Custom(func(t *rapid.T) Node {
		n := Node{
			ID:           id,
			Trust:        rapid.SampledFrom([]Trust{TrustPinned, TrustPinned, TrustPaired, TrustPaired, TrustDiscovered, TrustNone}).Draw(t, "trust"),
			Liveness:     rapid.SampledFrom([]Liveness{Alive, Alive, Alive, Alive, Alive, Alive, Suspect, Dead, LivenessUnknown}).Draw(t, "liveness"),
			FactsExpired: rapid.IntRange(0, 19).Draw(t, "expired") == 0,
			Gate:         rapid.SampledFrom([]Verdict{VerdictAllow, VerdictAllow, VerdictAllow, VerdictAllow, VerdictAllow, VerdictDeny, VerdictNone}).Draw(t, "gate"),
		}
		if n.Gate == VerdictDeny {
			n.GateReason = "policy"
		}
		for _, id := range rapid.SliceOfNDistinct(rapid.SampledFrom(genCapIDs), 0, 10, rapid.ID[string]).Draw(t, "caps") {
			n.Capabilities = append(n.Capabilities, genCapability(id).Draw(t, id))
		}
		n.Memory.Unified = rapid.Bool().Draw(t, "unified")
		n.Memory.HostFree = rapid.SampledFrom(genFree).Draw(t, "host_free")
		n.Memory.VRAMFree = rapid.SliceOfN(rapid.SampledFrom(genFree), 0, 3).Draw(t, "vram_free")
		for range rapid.IntRange(0, 2).Draw(t, "pending") {
			n.Pending = append(n.Pending, Resources{
				HostBytes:  rapid.SampledFrom(genDemand).Draw(t, "pending_host"),
				AccelBytes: rapid.SampledFrom(genDemand).Draw(t, "pending_accel"),
			})
		}
		for range rapid.IntRange(0, 2).Draw(t, "instances") {
			n.Instances = append(n.Instances, Instance{
				Kind:     "service",
				Name:     rapid.SampledFrom([]string{"w", "other"}).Draw(t, "instance"),
				Labels:   rapid.SliceOfN(rapid.SampledFrom(genLabels), 0, 1).Draw(t, "labels"),
				Excludes: rapid.SliceOfN(rapid.SampledFrom(genLabels), 0, 1).Draw(t, "excludes"),
			})
		}
		return n
	})
}

func genNodes(t *rapid.T) []Node {
	k := rapid.IntRange(0, 8).Draw(t, "nodes")
	nodes := make([]Node, k)
	for i := range nodes {
		nodes[i] = genNode(fmt.Sprintf("n-%d", i)).Draw(t, fmt.Sprintf("node %d", i))
	}
	return nodes
}

var genRequirement = rapid.Custom(func(t *rapid.T) Requirement {
	q := Requirement{
		Selector:      rapid.SampledFrom(genSelectors).Draw(t, "selector"),
		Count:         rapid.SampledFrom([]int{0, 1, 1, 2}).Draw(t, "count"),
		Exclusive:     rapid.Bool().Draw(t, "exclusive"),
		MinProvenance: rapid.SampledFrom(genMinimums).Draw(t, "min_provenance"),
	}
	if rapid.IntRange(0, 3).Draw(t, "pred") == 0 {
		q.Predicates = []Predicate{{AttrMemBytes, "gte", grammar.IntValue(int64(rapid.SampledFrom(genBytes).Draw(t, "gte")))}}
	}
	return q
})

func genRequest(t *rapid.T, nodes []Node) Request {
	req := Request{
		Kind: "service", Name: "w",
		Requirements:  rapid.SliceOfN(genRequirement, 0, 1).Draw(t, "common"),
		Labels:        rapid.SliceOfN(rapid.SampledFrom(genLabels), 0, 1).Draw(t, "labels"),
		Excludes:      rapid.SliceOfN(rapid.SampledFrom(genLabels), 0, 1).Draw(t, "excludes"),
		MinTrust:      rapid.SampledFrom([]Trust{TrustDiscovered, TrustPaired, TrustPaired, TrustPinned}).Draw(t, "min_trust"),
		MinProvenance: rapid.SampledFrom(genMinimums).Draw(t, "floor"),
		AllowEmulated: rapid.Bool().Draw(t, "allow_emulated"),
		Interactive:   rapid.Bool().Draw(t, "interactive"),
		Sticky:        rapid.Bool().Draw(t, "sticky"),
	}
	for i := range rapid.IntRange(1, 3).Draw(t, "variants") {
		req.Variants = append(req.Variants, Variant{
			Name:         fmt.Sprintf("v%d", i),
			Execution:    rapid.SampledFrom([]Execution{Native, Native, Emulated}).Draw(t, "execution"),
			Requirements: rapid.SliceOfN(genRequirement, 0, 2).Draw(t, "variant requirements"),
			Resources: Resources{
				HostBytes:  rapid.SampledFrom(genDemand).Draw(t, "host"),
				AccelBytes: rapid.SampledFrom(genDemand).Draw(t, "accel"),
			},
		})
	}
	if rapid.Bool().Draw(t, "preference") {
		req.Preferences = []Preference{{genRequirement.Draw(t, "preference"), float64(rapid.IntRange(0, 50).Draw(t, "weight"))}}
	}
	if rapid.Bool().Draw(t, "perf") {
		req.Perf = &PerfTarget{ID: "perf.infer.chat",
			Better: rapid.SampledFrom([]Better{BetterLower, BetterHigher}).Draw(t, "better")}
		if rapid.Bool().Draw(t, "budget") {
			req.Perf.Budget, req.Perf.HasBudget = float64(rapid.IntRange(0, 200).Draw(t, "budget")), true
		}
	}
	ids := []string{"n-x"}
	for _, n := range nodes {
		ids = append(ids, n.ID)
	}
	if rapid.Bool().Draw(t, "current") {
		req.CurrentNode = rapid.SampledFrom(ids).Draw(t, "current_node")
	}
	req.Prefer = rapid.SliceOfN(rapid.SampledFrom(ids), 0, 2).Draw(t, "prefer")
	req.Avoid = rapid.SliceOfN(rapid.SampledFrom(ids), 0, 3).Draw(t, "avoid")
	if rapid.IntRange(0, 9).Draw(t, "revocable") == 0 {
		req.RevocableRefs = []string{"pkg-1"}
	}
	return req
}

func genCluster(t *rapid.T, nodes []Node) Cluster {
	var cl Cluster
	for _, n := range nodes {
		if rapid.IntRange(0, 9).Draw(t, "revoke node") == 0 {
			cl.RevokedNodes = append(cl.RevokedNodes, n.ID)
		}
	}
	if rapid.IntRange(0, 4).Draw(t, "revoke ref") == 0 {
		cl.RevokedRefs = []string{"pkg-1"}
	}
	return cl
}

type scenario struct {
	req   Request
	nodes []Node
	cl    Cluster
	w     Weights
}

func genScenario(t *rapid.T) scenario {
	nodes := genNodes(t)
	s := scenario{req: genRequest(t, nodes), nodes: nodes, cl: genCluster(t, nodes), w: DefaultWeights()}
	if rapid.Bool().Draw(t, "random weights") {
		f := func(name string) float64 { return float64(rapid.IntRange(0, 2000).Draw(t, name)) }
		s.w.Native, s.w.Emulated, s.w.DevFallback = f("native"), f("emulated"), f("dev_fallback")
		s.w.Load, s.w.Sticky, s.w.Perf = f("load"), f("sticky"), f("perf")
	}
	return s
}

// oracle checks, independently of the engine's code, every hard
// constraint of one node for a chosen route and assignment. It returns the
// node-level constraints the node fails, and the problems of the route.
type oracle struct{ s scenario }

func (o oracle) nodeFailures(n Node) []Code {
	req, cl := o.s.req, o.s.cl
	var codes []Code
	if slices.Contains(cl.RevokedNodes, n.ID) {
		codes = append(codes, CodeNodeRevoked)
	}
	if n.Liveness != Alive {
		codes = append(codes, CodeLiveness)
	}
	if n.FactsExpired {
		codes = append(codes, CodeFactsExpired)
	}
	if n.Trust < req.MinTrust {
		codes = append(codes, CodeTrust)
	}
	for _, r := range req.RevocableRefs {
		if slices.Contains(cl.RevokedRefs, r) {
			codes = append(codes, CodeWorkloadRevoked)
			break
		}
	}
	for _, in := range n.Instances {
		if in.Kind == req.Kind && in.Name == req.Name {
			continue
		}
		clash := false
		for _, l := range in.Labels {
			clash = clash || slices.Contains(req.Excludes, l)
		}
		for _, x := range in.Excludes {
			clash = clash || slices.Contains(req.Labels, x)
		}
		if clash {
			codes = append(codes, CodeCoResidency)
			break
		}
	}
	if n.Gate != VerdictAllow {
		codes = append(codes, CodeGate)
	}
	if p := req.Perf; p != nil && p.HasBudget {
		best, found := 0.0, false
		for _, c := range n.Capabilities {
			if c.ID != p.ID || c.Provenance != "measured" {
				continue
			}
			for _, a := range c.Attrs {
				if f, ok := a.Value.Number(); ok && a.Value.Kind() == grammar.KindFloat && f >= 0 {
					if !found || (p.Better == BetterLower && f < best) || (p.Better == BetterHigher && f > best) {
						best, found = f, true
					}
				}
			}
		}
		if found && ((p.Better == BetterLower && best > p.Budget) || (p.Better == BetterHigher && best < p.Budget)) {
			codes = append(codes, CodePerfBudget)
		}
	}
	return codes
}

var provenanceRank = map[string]int{"claimed": 1, "probed": 2, "measured": 3}

// routeProblems checks an eligible candidate's route: the variant is
// allowed, every requirement got Count capabilities that it selects and
// may use, no capability held exclusively serves two requirements (or one
// twice), and memory with pending reservations fits.
func (o oracle) routeProblems(n Node, c Candidate) []string {
	req := o.s.req
	var problems []string
	vi := slices.IndexFunc(req.Variants, func(v Variant) bool { return v.Name == c.Variant })
	if vi < 0 {
		return []string{"unknown variant " + c.Variant}
	}
	v := req.Variants[vi]
	if v.Execution == Emulated && !req.AllowEmulated {
		problems = append(problems, "emulated route without allow_emulated")
	}
	reqs := slices.Concat(req.Requirements, v.Requirements)
	if len(c.Assigned()) != len(reqs) {
		return append(problems, fmt.Sprintf("%d assignments for %d requirements", len(c.Assigned()), len(reqs)))
	}
	held := map[string]int{} // capability id -> requirements holding it exclusively
	used := map[string]int{} // capability id -> requirements using it
	for k, q := range reqs {
		count := max(q.Count, 1)
		if len(c.Assigned()[k]) != count {
			problems = append(problems, fmt.Sprintf("requirement %d (%s): %d capabilities, need %d", k, q.Selector, len(c.Assigned()[k]), count))
		}
		seen := map[string]bool{}
		for _, id := range c.Assigned()[k] {
			if seen[id] {
				problems = append(problems, fmt.Sprintf("requirement %d: %s given twice", k, id))
			}
			seen[id] = true
			i := slices.IndexFunc(n.Capabilities, func(c Capability) bool { return c.ID == id })
			if i < 0 {
				problems = append(problems, "assigned unknown capability "+id)
				continue
			}
			cp := n.Capabilities[i]
			if !(id == q.Selector || strings.HasPrefix(id, q.Selector+".")) {
				problems = append(problems, fmt.Sprintf("%s does not match selector %s", id, q.Selector))
			}
			need := max(provenanceRank[q.MinProvenance], provenanceRank[req.MinProvenance])
			if provenanceRank[cp.Provenance] < need {
				problems = append(problems, fmt.Sprintf("%s provenance %q below %d", id, cp.Provenance, need))
			}
			for _, p := range q.Predicates { // the generator only makes "mem_bytes gte N"
				ok := false
				for _, a := range cp.Attrs {
					ai, isInt := a.Value.Int()
					pi, _ := p.Value.Int()
					ok = ok || (a.Name == p.Attr && isInt && ai >= pi)
				}
				if !ok {
					problems = append(problems, fmt.Sprintf("%s fails %s %s %v", id, p.Attr, p.Op, p.Value))
				}
			}
			exclusive := q.Exclusive || cp.Exclusive
			switch cp.State {
			case "", "available":
			case "busy":
				if exclusive {
					problems = append(problems, id+" is busy and held exclusively")
				}
			default:
				problems = append(problems, id+" is "+cp.State)
			}
			used[id]++
			if exclusive {
				held[id]++
			}
		}
	}
	for id, h := range held {
		if h > 1 || used[id] > 1 {
			problems = append(problems, fmt.Sprintf("exclusive capability %s serves %d requirements", id, used[id]))
		}
	}
	if !memoryFitsOracle(n, v.Resources) {
		problems = append(problems, "memory over-committed")
	}
	return problems
}

// memoryFitsOracle checks the pools in arbitrary precision.
func memoryFitsOracle(n Node, r Resources) bool {
	sum := func(xs ...uint64) *big.Int {
		s := new(big.Int)
		for _, x := range xs {
			s.Add(s, new(big.Int).SetUint64(x))
		}
		return s
	}
	var ph, pa []uint64
	for _, p := range n.Pending {
		ph, pa = append(ph, p.HostBytes), append(pa, p.AccelBytes)
	}
	if n.Memory.Unified {
		if r.HostBytes == 0 && r.AccelBytes == 0 {
			return true
		}
		need := sum(append(append([]uint64{r.HostBytes, r.AccelBytes}, ph...), pa...)...)
		return need.Cmp(sum(n.Memory.HostFree)) <= 0
	}
	if r.HostBytes > 0 && sum(append([]uint64{r.HostBytes}, ph...)...).Cmp(sum(n.Memory.HostFree)) > 0 {
		return false
	}
	if r.AccelBytes > 0 && sum(append([]uint64{r.AccelBytes}, pa...)...).Cmp(sum(n.Memory.VRAMFree...)) > 0 {
		return false
	}
	return true
}

func nodeByID(nodes []Node, id string) Node {
	i := slices.IndexFunc(nodes, func(n Node) bool { return n.ID == id })
	return nodes[i]
}

// TestPropertyNeverPlacesOnAFailingNode: every eligible candidate, and so
// the chosen node, passes every constraint (checked by the oracle, not the
// engine), and every node's node-level rejections are exactly the ones the
// oracle finds.
func TestPropertyNeverPlacesOnAFailingNode(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		d, err := Place(s.req, s.nodes, s.cl, s.w)
		if err != nil {
			t.Fatalf("Place: %v", err)
		}
		o := oracle{s}
		for _, c := range d.Candidates {
			n := nodeByID(s.nodes, c.Node)
			want := o.nodeFailures(n)
			var got []Code
			for _, r := range c.Rejections {
				switch r.Code {
				case CodeRequirements, CodeProvenance, CodeMemory, CodeEmulationNotAllowed:
				default:
					if !slices.Contains(got, r.Code) {
						got = append(got, r.Code)
					}
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s node-level rejections (-oracle +engine):\n%s", c.Node, diff)
			}
			if c.Eligible() {
				if problems := o.routeProblems(n, c); len(problems) > 0 {
					t.Fatalf("eligible %s breaks constraints: %v", c.Node, problems)
				}
			}
		}
		if d.Chosen != nil && !candidateOf(d, d.Chosen.Node).Eligible() {
			t.Fatalf("chose rejected %s", d.Chosen.Node)
		}
	})
}

// TestPropertyMemoryNeverOvercommitted: the chosen route's demand plus the
// node's pending reservations fits every pool it draws on.
func TestPropertyMemoryNeverOvercommitted(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		d, err := Place(s.req, s.nodes, s.cl, s.w)
		if err != nil {
			t.Fatalf("Place: %v", err)
		}
		if d.Chosen == nil {
			return
		}
		v := s.req.Variants[slices.IndexFunc(s.req.Variants, func(v Variant) bool { return v.Name == d.Chosen.Variant })]
		if !memoryFitsOracle(nodeByID(s.nodes, d.Chosen.Node), v.Resources) {
			t.Fatalf("%s over-committed by %s", d.Chosen.Node, v.Name)
		}
	})
}

// TestPropertySameInputSameDecision: any order of the nodes gives the
// same decision and the same explanation.
func TestPropertySameInputSameDecision(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		want, wantErr := Place(s.req, s.nodes, s.cl, s.w)
		shuffled := rapid.Permutation(s.nodes).Draw(t, "order")
		got, gotErr := Place(s.req, shuffled, s.cl, s.w)
		sameDecision(t, want, wantErr, got, gotErr,
			"decision depends on node order (-first +shuffled):\n%s", "explanation depends on node order")
	})
}

// TestPropertyPreparedSameDecision: nodes given with Profiles decide as
// the same nodes given with their records, whatever the Symbols has
// interned before (one Symbols serves every scenario, and some nodes are
// prepared twice, so that records and strings repeat and symbols come in
// any order).
func TestPropertyPreparedSameDecision(t *testing.T) {
	syms := NewSymbols()
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		want, wantErr := Place(s.req, s.nodes, s.cl, s.w)
		nodes := prepared(syms, s.nodes)
		if len(s.nodes) > 0 && rapid.Bool().Draw(t, "prepare again") {
			i := rapid.IntRange(0, len(s.nodes)-1).Draw(t, "node")
			nodes[i].Profile = syms.Prepare(s.nodes[i].Capabilities, s.nodes[i].Memory)
		}
		got, gotErr := Place(s.req, nodes, s.cl, s.w)
		sameDecision(t, want, wantErr, got, gotErr,
			"prepared nodes decide otherwise (-records +profiles):\n%s", "prepared nodes explain otherwise")
	})
}

// TestPropertyPinNeverOverridesAConstraint: a pin is chosen exactly when
// it is eligible; otherwise Place fails naming every one of its
// rejections.
func TestPropertyPinNeverOverridesAConstraint(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		if len(s.nodes) == 0 {
			return
		}
		s.req.Pin = rapid.SampledFrom(s.nodes).Draw(t, "pin").ID
		d, err := Place(s.req, s.nodes, s.cl, s.w)
		c := candidateOf(d, s.req.Pin)
		var pe *PinIneligibleError
		switch {
		case err == nil:
			if !c.Eligible() || d.Chosen == nil || d.Chosen.Node != s.req.Pin || d.Chosen.Flags&FlagPinned == 0 {
				t.Fatalf("pin %s: chosen %+v, candidate %+v", s.req.Pin, d.Chosen, c)
			}
		case errors.As(err, &pe):
			if c.Eligible() || d.Chosen != nil || pe.Node != s.req.Pin {
				t.Fatalf("pin error %v for an eligible pin, or with a placement", err)
			}
			if diff := cmp.Diff(c.Rejections, pe.Rejections, rejText); diff != "" {
				t.Fatalf("error names other rejections (-candidate +error):\n%s", diff)
			}
			if problems := (oracle{s}).nodeFailures(nodeByID(s.nodes, s.req.Pin)); len(problems) == 0 && len(c.Rejections) == 0 {
				t.Fatal("rejected with no reason")
			}
		default:
			t.Fatalf("Place: %v", err)
		}
	})
}

// TestPropertyTierOrder: the ranking lists every node once, eligible
// first by tier (a lower tier never outranks a higher one), then score
// descending, then node id; rejected ones by node id. Without a pin the
// choice is in the best tier, whatever prefer and avoid say.
func TestPropertyTierOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		d, err := Place(s.req, s.nodes, s.cl, s.w)
		if err != nil {
			t.Fatalf("Place: %v", err)
		}
		if len(d.Candidates) != len(s.nodes) {
			t.Fatalf("%d candidates for %d nodes", len(d.Candidates), len(s.nodes))
		}
		seen := map[string]bool{}
		for i, c := range d.Candidates {
			if seen[c.Node] {
				t.Fatalf("%s listed twice", c.Node)
			}
			seen[c.Node] = true
			if i == 0 {
				continue
			}
			p := d.Candidates[i-1]
			switch {
			case !p.Eligible() && c.Eligible():
				t.Fatalf("eligible %s after rejected %s", c.Node, p.Node)
			case !c.Eligible() && !p.Eligible() && p.Node > c.Node:
				t.Fatalf("rejected out of id order: %s, %s", p.Node, c.Node)
			case c.Eligible() && p.Tier > c.Tier:
				t.Fatalf("%s (tier %s) ranked above %s (tier %s)", p.Node, p.Tier, c.Node, c.Tier)
			case c.Eligible() && p.Tier == c.Tier && p.Score.Total < c.Score.Total:
				t.Fatalf("%s (%v) ranked above %s (%v)", p.Node, p.Score.Total, c.Node, c.Score.Total)
			case c.Eligible() && p.Tier == c.Tier && p.Score.Total == c.Score.Total && p.Node > c.Node:
				t.Fatalf("tie out of id order: %s, %s", p.Node, c.Node)
			}
		}
		eligible := len(d.Candidates) > 0 && d.Candidates[0].Eligible()
		if eligible != (d.Chosen != nil) {
			t.Fatalf("eligible nodes %v but chosen %+v", eligible, d.Chosen)
		}
		if d.Chosen != nil && d.Chosen.Tier != d.Candidates[0].Tier {
			t.Fatalf("prefer %v / avoid %v crossed a tier: chose %s (%s), best tier %s",
				s.req.Prefer, s.req.Avoid, d.Chosen.Node, d.Chosen.Tier, d.Candidates[0].Tier)
		}
	})
}

func candidateOf(d Decision, node string) Candidate {
	for _, c := range d.Candidates {
		if c.Node == node {
			return c
		}
	}
	return Candidate{Node: node, Rejections: []Rejection{{Code: "missing"}}}
}

// TestPropertyJointMatcher: on one node and one native route whose other
// constraints all pass, the engine finds an assignment exactly when brute
// force does, and never gives a capability held exclusively to two
// requirements (the oracle's routeProblems).
func TestPropertyJointMatcher(t *testing.T) {
	// Accelerators, mostly usable, and requirements that compete for them.
	ids := []string{"accel.gpu.0", "accel.gpu.1", "accel.gpu.2", "accel.npu.0", "accel.npu.1", "os.linux"}
	genReq := rapid.Custom(func(t *rapid.T) Requirement {
		q := Requirement{
			Selector:  rapid.SampledFrom([]string{"accel", "accel.gpu", "accel.gpu", "accel.npu", "os.linux"}).Draw(t, "selector"),
			Count:     rapid.SampledFrom([]int{1, 1, 2}).Draw(t, "count"),
			Exclusive: rapid.Bool().Draw(t, "exclusive"),
		}
		if rapid.IntRange(0, 4).Draw(t, "pred") == 0 {
			q.Predicates = []Predicate{{AttrMemBytes, "gte", grammar.IntValue(int64(rapid.SampledFrom(genBytes).Draw(t, "gte")))}}
		}
		return q
	})
	rapid.Check(t, func(t *rapid.T) {
		n := Node{ID: "n-0", Trust: TrustPinned, Liveness: Alive, Gate: VerdictAllow}
		for _, id := range rapid.SliceOfNDistinct(rapid.SampledFrom(ids), 1, len(ids), rapid.ID[string]).Draw(t, "caps") {
			c := Capability{ID: id, Provenance: "probed",
				State:     rapid.SampledFrom([]string{"", "", "", "", "busy", "reserved"}).Draw(t, "state"),
				Exclusive: rapid.IntRange(0, 2).Draw(t, "exclusive") == 0}
			if rapid.Bool().Draw(t, "has_mem") {
				c.Attrs = []Attr{{AttrMemBytes, grammar.IntValue(int64(rapid.SampledFrom(genBytes).Draw(t, "mem_bytes")))}}
			}
			n.Capabilities = append(n.Capabilities, c)
		}
		reqs := rapid.SliceOfN(genReq, 2, 4).Draw(t, "requirements")
		req := Request{Kind: "service", Name: "w", MinTrust: TrustPaired,
			Variants: []Variant{{Name: "only", Requirements: reqs}}}
		d, err := Place(req, []Node{n}, Cluster{}, DefaultWeights())
		if err != nil {
			t.Fatalf("Place: %v", err)
		}
		c := d.Candidates[0]
		if want := bruteForce(n.Capabilities, reqs); c.Eligible() != want {
			t.Fatalf("engine eligible %v, brute force %v; rejections %v", c.Eligible(), want, c.Rejections)
		}
		if c.Eligible() {
			if problems := (oracle{scenario{req: req}}).routeProblems(n, c); len(problems) > 0 {
				t.Fatalf("assignment breaks constraints: %v", problems)
			}
		}
	})
}

// bruteForce tries every combination of capabilities for every
// requirement.
func bruteForce(caps []Capability, reqs []Requirement) bool {
	type option []int
	options := make([][]option, len(reqs))
	for k, q := range reqs {
		var usable []int
		for i, c := range caps {
			if !(c.ID == q.Selector || strings.HasPrefix(c.ID, q.Selector+".")) {
				continue
			}
			if provenanceRank[c.Provenance] < provenanceRank[q.MinProvenance] {
				continue
			}
			ok := true
			for _, p := range q.Predicates {
				has := false
				for _, a := range c.Attrs {
					ai, _ := a.Value.Int()
					pi, _ := p.Value.Int()
					has = has || (a.Name == p.Attr && ai >= pi)
				}
				ok = ok && has
			}
			exclusive := q.Exclusive || c.Exclusive
			if !ok || !(c.State == "" || c.State == "available" || (c.State == "busy" && !exclusive)) {
				continue
			}
			usable = append(usable, i)
		}
		count := max(q.Count, 1)
		var combos func(from int, cur option)
		combos = func(from int, cur option) {
			if len(cur) == count {
				options[k] = append(options[k], slices.Clone(cur))
				return
			}
			for i := from; i < len(usable); i++ {
				combos(i+1, append(cur, usable[i]))
			}
		}
		combos(0, nil)
	}
	var try func(k int, users, holders map[int]int) bool
	try = func(k int, users, holders map[int]int) bool {
		if k == len(reqs) {
			for i, h := range holders {
				if h > 0 && users[i] > 1 {
					return false
				}
			}
			return true
		}
		for _, opt := range options[k] {
			for _, i := range opt {
				users[i]++
				if reqs[k].Exclusive || caps[i].Exclusive {
					holders[i]++
				}
			}
			ok := try(k+1, users, holders)
			for _, i := range opt {
				users[i]--
				if reqs[k].Exclusive || caps[i].Exclusive {
					holders[i]--
				}
			}
			if ok {
				return true
			}
		}
		return false
	}
	return try(0, map[int]int{}, map[int]int{})
}

// TestPropertyDisjointRouteAsGreedy: a route whose requirements select no
// common capability id is not matched jointly; each requirement gets
// what it would alone (joint.aloneOf). That is what the greedy matcher
// gives it, capability for capability, whenever each requirement passes
// alone.
func TestPropertyDisjointRouteAsGreedy(t *testing.T) {
	ids := []string{"accel.gpu.0", "accel.gpu.1", "accel.gpu.2", "accel.npu.0", "accel.npu.1", "os.linux"}
	genReq := rapid.Custom(func(t *rapid.T) Requirement {
		return Requirement{
			Selector:  rapid.SampledFrom([]string{"accel", "accel.gpu", "accel.npu", "os.linux"}).Draw(t, "selector"),
			Count:     rapid.SampledFrom([]int{1, 1, 2}).Draw(t, "count"),
			Exclusive: rapid.Bool().Draw(t, "exclusive"),
		}
	})
	disjoint := 0
	rapid.Check(t, func(t *rapid.T) {
		var caps []Capability
		for _, id := range rapid.SliceOfNDistinct(rapid.SampledFrom(ids), 1, len(ids), rapid.ID[string]).Draw(t, "caps") {
			caps = append(caps, Capability{ID: id, Provenance: "probed",
				State:     rapid.SampledFrom([]string{"", "", "", "busy"}).Draw(t, "state"),
				Exclusive: rapid.IntRange(0, 2).Draw(t, "exclusive") == 0})
		}
		reqs := rapid.SliceOfN(genReq, 1, 3).Draw(t, "requirements")
		req := Request{Kind: "service", Name: "w", Variants: []Variant{{Name: "only", Requirements: reqs}}}
		w, cl := DefaultWeights(), Cluster{}
		syms := NewSymbols()
		pr := syms.Prepare(caps, Memory{})
		p := compile(&req, &w, &cl, syms)
		if !p.disjoint[0] {
			return
		}
		s := newNodeScan(len(p.reqs))
		s.scan(p, pr)
		s.ensure(p, pr, 0)
		for ri := range p.reqs {
			if int(s.stats[ri].usable) < p.reqs[ri].count {
				return
			}
		}
		disjoint++
		j := newJoint(p, s)
		route := p.routes[0]
		if !j.solve(p, 0, route, pr.caps) {
			t.Fatalf("a disjoint route whose requirements pass alone does not solve")
		}
		alone := make([][]int32, len(route))
		for k, ri := range route {
			alone[k] = slices.Clone(j.assignOf(p, ri))
		}
		if !j.greedy(p, route, pr.caps) {
			t.Fatalf("greedy fails a disjoint route whose requirements pass alone")
		}
		for k, ri := range route {
			at := j.assignAt[ri]
			if greedy := j.assignBuf[at : at+j.alen[ri]]; !slices.Equal(alone[k], greedy) {
				t.Fatalf("requirement %d: alone %v, greedy %v", k, alone[k], greedy)
			}
		}
	})
	if disjoint == 0 {
		t.Fatal("no disjoint route was drawn")
	}
}
