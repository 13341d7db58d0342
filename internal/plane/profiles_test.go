package plane

import (
	"crypto/ed25519"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// recordFacts are facts with capability records.
func recordFacts(freeGiB int64) facts.Facts {
	f := sampleFacts()
	f.Capabilities = []facts.Capability{
		{ID: "os.linux", Provenance: grammar.ProvenanceProbed, State: grammar.StateAvailable},
		{ID: "mem.system", Provenance: grammar.ProvenanceProbed, State: grammar.StateAvailable,
			Attrs: map[string]grammar.Value{"free": grammar.IntValue(freeGiB << 30), "total": grammar.IntValue(32 << 30)}},
	}
	return f
}

// TestProfilesKeptWhileFactsUnchanged: a node's Profile is prepared once
// and kept while its facts hold the same records, whatever their seq;
// facts with other records, or other legacy fields, get a new one, and
// only for that node.
func TestProfilesKeptWhileFactsUnchanged(t *testing.T) {
	k1, id1 := testKey(t, 1)
	k2, id2 := testKey(t, 2)
	n1 := &nodeState{target: Target{ID: id1, Key: k1.Public().(ed25519.PublicKey), Tier: engine.TrustPaired}}
	n2 := &nodeState{target: Target{ID: id2, Key: k2.Public().(ed25519.PublicKey), Tier: engine.TrustPaired}}
	ingest := func(n *nodeState, k ed25519.PrivateKey, f facts.Facts, seq uint64) {
		t.Helper()
		if err := n.ingestFacts(signFacts(t, k, f, seq, t0), t0); err != nil {
			t.Fatal(err)
		}
	}
	ingest(n1, k1, recordFacts(16), 1)
	ingest(n2, k2, sampleFacts(), 1) // no records: derived from the old fields
	nodes := map[string]*nodeState{id1: n1, id2: n2}

	var ps profiles
	ps.begin(nodes)
	p1, p2 := ps.of(n1), ps.of(n2)
	if p1 == nil || p2 == nil || p1 == p2 {
		t.Fatalf("profiles %p %p", p1, p2)
	}
	ps.begin(nodes)
	if ps.of(n1) != p1 || ps.of(n2) != p2 {
		t.Fatal("unchanged facts prepared again")
	}

	// A new seq with the same records keeps the Profile.
	ingest(n1, k1, recordFacts(16), 2)
	ingest(n2, k2, sampleFacts(), 2)
	ps.begin(nodes)
	if ps.of(n1) != p1 || ps.of(n2) != p2 {
		t.Fatal("facts with a new seq and the same records prepared again")
	}

	// Other free memory is another Profile, for that node only.
	ingest(n1, k1, recordFacts(8), 3)
	ps.begin(nodes)
	q1 := ps.of(n1)
	if q1 == p1 || ps.of(n2) != p2 {
		t.Fatalf("changed records: profile kept %v, other node's changed %v", q1 == p1, ps.of(n2) != p2)
	}
	legacy := sampleFacts()
	legacy.MemFreeBytes = 4 << 30
	ingest(n2, k2, legacy, 3)
	ps.begin(nodes)
	if ps.of(n2) == p2 || ps.of(n1) != q1 {
		t.Fatal("changed legacy fields: profile kept, or the other node's changed")
	}

	// A node without facts has the empty Profile; a node that is gone is
	// forgotten.
	n3 := &nodeState{target: Target{ID: "n-3"}}
	nodes["n-3"] = n3
	delete(nodes, id2)
	ps.begin(nodes)
	if e := ps.of(n3); e == nil || ps.of(n3) != e {
		t.Fatal("no stable Profile for a node without facts")
	}
	if _, ok := ps.byNode[id2]; ok {
		t.Fatal("a node no longer known kept its Profile")
	}
}

// TestProfilesStartAnewPastMaxSymbols: a vocabulary grown past
// maxSymbols is dropped, and every node prepared again with a new one.
func TestProfilesStartAnewPastMaxSymbols(t *testing.T) {
	k, id := testKey(t, 1)
	n := &nodeState{target: Target{ID: id, Key: k.Public().(ed25519.PublicKey), Tier: engine.TrustPaired}}
	if err := n.ingestFacts(signFacts(t, k, recordFacts(16), 1, t0), t0); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*nodeState{id: n}
	var ps profiles
	ps.begin(nodes)
	p := ps.of(n)
	var junk []engine.Capability
	for i := range maxSymbols(len(nodes)) {
		junk = append(junk, engine.Capability{ID: fmt.Sprintf("x.y%d", i)})
	}
	ps.syms.Prepare(junk, engine.Memory{})
	old := ps.syms
	ps.begin(nodes)
	if ps.syms == old || ps.of(n) == p {
		t.Fatal("vocabulary past maxSymbols kept")
	}
}

// TestViewKeepsProfiles: the controller's view gives every decision the
// Profiles of the facts it holds; a tick that brings the same records
// (with a new seq, as every describe does) keeps them, and a host whose
// memory changed gets a new one, alone.
func TestViewKeepsProfiles(t *testing.T) {
	r, hs := newRig(t, 8, 8, 8)
	r.tick()
	profilesOf := func() map[string]*engine.Profile {
		out := map[string]*engine.Profile{}
		for _, n := range r.c.rec.view(r.clk.Now(), "service", "echo") {
			if n.Profile == nil {
				t.Fatalf("%s: no Profile", n.ID)
			}
			out[n.ID] = n.Profile
		}
		return out
	}
	first := profilesOf()
	if len(first) != 3 {
		t.Fatalf("%d nodes", len(first))
	}
	r.clk.Advance(time.Second)
	r.tick()
	second := profilesOf()
	for id, p := range first {
		if second[id] != p {
			t.Errorf("%s: prepared again although its records did not change", id)
		}
	}
	r.cl.Set(hs[1], func(h *planetest.Host) { h.Facts.MemFreeBytes = 4 << 30 })
	r.tick()
	third := profilesOf()
	for id, p := range first {
		if changed := third[id] != p; changed != (id == hs[1].ID) {
			t.Errorf("%s: profile changed %v", id, changed)
		}
	}
	// The decision reads the new memory.
	d, err := engine.Place(engine.Request{Kind: "service", Name: "w", MinTrust: engine.TrustPaired,
		Variants: []engine.Variant{{Name: "cpu", Resources: engine.Resources{HostBytes: 6 << 30}}}},
		r.c.rec.view(r.clk.Now(), "service", "w"), engine.Cluster{}, engine.DefaultWeights())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Candidates {
		if c.Eligible() == (c.Node == hs[1].ID) {
			t.Errorf("%s eligible %v\n%s", c.Node, c.Eligible(), d.Explain())
		}
	}
}

// TestProfilesCompacted: the Profiles of a view of compactMin nodes or
// more are given compacted, and kept so while few nodes change; a node
// whose records change gets its own new Profile at once, and when an
// eighth of the nodes have changed, every Profile is compacted again.
// Decisions over them are those over the Profiles they were compacted
// from.
func TestProfilesCompacted(t *testing.T) {
	const n = compactMin + 72
	nodes := map[string]*nodeState{}
	keys := map[string]ed25519.PrivateKey{}
	var ids []string
	for i := range n {
		k, id := testKey(t, byte(i+1))
		keys[id] = k
		nodes[id] = &nodeState{target: Target{ID: id, Key: k.Public().(ed25519.PublicKey), Tier: engine.TrustPaired}}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	seq := uint64(0)
	ingest := func(id string, freeGiB int64) {
		t.Helper()
		seq++
		if err := nodes[id].ingestFacts(signFacts(t, keys[id], recordFacts(freeGiB), seq, t0), t0); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		ingest(id, 16)
	}
	var ps profiles
	view := func() []engine.Node {
		ps.begin(nodes)
		out := make([]engine.Node, len(ids))
		for i, id := range ids {
			out[i] = engine.Node{ID: id, Liveness: engine.Alive, Trust: engine.TrustPaired, Gate: engine.VerdictAllow,
				Profile: ps.of(nodes[id])}
		}
		ps.compact(ids, out)
		return out
	}
	// What the engine decides over the nodes: which are eligible for 6
	// GiB of host memory.
	eligible := func(nodes []engine.Node) map[string]bool {
		t.Helper()
		d, err := engine.Place(engine.Request{Kind: "service", Name: "w", MinTrust: engine.TrustPaired,
			Variants: []engine.Variant{{Name: "cpu", Resources: engine.Resources{HostBytes: 6 << 30}}}},
			nodes, engine.Cluster{}, engine.DefaultWeights())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, c := range d.Candidates {
			out[c.Node] = c.Eligible()
		}
		return out
	}
	first := view()
	for i, nd := range first {
		if e := ps.byNode[ids[i]]; nd.Profile != e.compacted || e.compacted == nil || e.compacted == e.profile {
			t.Fatalf("%s: Profile not compacted", ids[i])
		}
	}
	if again := view(); !slices.EqualFunc(first, again, func(a, b engine.Node) bool { return a.Profile == b.Profile }) {
		t.Fatal("unchanged nodes compacted again")
	}

	// One node with less memory: its own new Profile, the others kept.
	ingest(ids[3], 4)
	second := view()
	for i := range ids {
		if changed := second[i].Profile != first[i].Profile; changed != (i == 3) {
			t.Fatalf("%s: profile changed %v", ids[i], changed)
		}
	}
	if got := eligible(second); slices.ContainsFunc(ids, func(id string) bool { return got[id] == (id == ids[3]) }) {
		t.Fatalf("decision over one node changed: %v", got)
	}

	// An eighth of the nodes changed: every Profile compacted again.
	for _, id := range ids[:n/8] {
		ingest(id, 5)
	}
	third := view()
	for i, nd := range third {
		if e := ps.byNode[ids[i]]; nd.Profile == second[i].Profile || nd.Profile != e.compacted {
			t.Fatalf("%s: not compacted again", ids[i])
		}
	}
	if got := eligible(third); slices.ContainsFunc(ids, func(id string) bool { return got[id] == slices.Contains(ids[:n/8], id) }) {
		t.Fatalf("decision over compacted nodes: %v", got)
	}
}
