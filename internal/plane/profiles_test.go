package plane

import (
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
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
		for _, n := range r.c.view(r.clk.Now(), "service", "echo") {
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
	r.cl.set(hs[1], func(h *fakeHost) { h.facts.MemFreeBytes = 4 << 30 })
	r.tick()
	third := profilesOf()
	for id, p := range first {
		if changed := third[id] != p; changed != (id == hs[1].id) {
			t.Errorf("%s: profile changed %v", id, changed)
		}
	}
	// The decision reads the new memory.
	d, err := engine.Place(engine.Request{Kind: "service", Name: "w", MinTrust: engine.TrustPaired,
		Variants: []engine.Variant{{Name: "cpu", Resources: engine.Resources{HostBytes: 6 << 30}}}},
		r.c.view(r.clk.Now(), "service", "w"), engine.Cluster{}, engine.DefaultWeights())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Candidates {
		if c.Eligible() == (c.Node == hs[1].id) {
			t.Errorf("%s eligible %v\n%s", c.Node, c.Eligible(), d.Explain())
		}
	}
}
