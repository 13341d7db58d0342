package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// samePlace checks that pl decides as Place on the same arguments, error
// and explanation included.
func samePlace(t interface {
	Helper()
	Fatalf(string, ...any)
}, pl *Placer, s scenario, nodes []Node, what string) Decision {
	t.Helper()
	want, wantErr := Place(s.req, nodes, s.cl, s.w)
	got, gotErr := pl.Place(s.req, nodes, s.cl, s.w)
	if fmt.Sprint(wantErr) != fmt.Sprint(gotErr) {
		t.Fatalf("%s: errors differ: Place %v / Placer %v", what, wantErr, gotErr)
	}
	if diff := cmp.Diff(want, got, rejText); diff != "" {
		t.Fatalf("%s: the Placer decides otherwise (-Place +Placer):\n%s", what, diff)
	}
	if want.Explain() != got.Explain() {
		t.Fatalf("%s: the Placer explains otherwise", what)
	}
	return got
}

// sameDecision fails unless got and gotErr are want and wantErr, the
// explanation included: diffMsg (a format for the -want +got diff) and
// explainMsg say what differs.
func sameDecision(t interface {
	Helper()
	Fatal(...any)
	Fatalf(string, ...any)
}, want Decision, wantErr error, got Decision, gotErr error, diffMsg, explainMsg string) {
	t.Helper()
	if fmt.Sprint(wantErr) != fmt.Sprint(gotErr) {
		t.Fatalf("errors differ: %v / %v", wantErr, gotErr)
	}
	if diff := cmp.Diff(want, got, rejText); diff != "" {
		t.Fatalf(diffMsg, diff)
	}
	if want.Explain() != got.Explain() {
		t.Fatal(explainMsg)
	}
}

// TestPropertyPlacerSameDecision: a Placer, kept across every scenario,
// decides as Place whatever it decided before: the same nodes again (its
// kept order of ids), the nodes in another order, one node's id changed
// or repeated, and the nodes given with Profiles.
func TestPropertyPlacerSameDecision(t *testing.T) {
	var pl Placer
	syms := NewSymbols()
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		samePlace(t, &pl, s, s.nodes, "first")
		samePlace(t, &pl, s, s.nodes, "again")
		samePlace(t, &pl, s, rapid.Permutation(s.nodes).Draw(t, "order"), "shuffled")
		if len(s.nodes) > 0 {
			changed := slices.Clone(s.nodes)
			i := rapid.IntRange(0, len(changed)-1).Draw(t, "node")
			switch rapid.IntRange(0, 2).Draw(t, "change") {
			case 0:
				changed[i].ID = "n-renamed"
			case 1:
				changed[i].ID = changed[0].ID // repeated when i > 0
			case 2:
				changed[i].ID = ""
			}
			samePlace(t, &pl, s, changed, "changed id")
			samePlace(t, &pl, s, changed, "changed id again")
		}
		samePlace(t, &pl, s, prepared(syms, s.nodes), "prepared")
	})
}

// TestPropertyCompactSameDecision: nodes given with compacted Profiles
// (Compact, in the order of the nodes or another, some Profiles nil in
// what is compacted) decide as the nodes given with their records, by
// Place and by a Placer kept across scenarios.
func TestPropertyCompactSameDecision(t *testing.T) {
	var pl Placer
	syms := NewSymbols()
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		want, wantErr := Place(s.req, s.nodes, s.cl, s.w)
		nodes := prepared(syms, s.nodes)
		prs := make([]*Profile, 0, 2*len(nodes))
		for _, n := range rapid.Permutation(nodes).Draw(t, "compacted in order") {
			prs = append(prs, n.Profile)
			if rapid.Bool().Draw(t, "a nil too") {
				prs = append(prs, nil)
			}
		}
		compact := Compact(prs)
		for i := range nodes {
			k := slices.Index(prs, nodes[i].Profile)
			if compact[k] == prs[k] {
				t.Fatalf("Profile %d was not copied", k)
			}
			nodes[i].Profile = compact[k]
		}
		for k := range prs {
			if (prs[k] == nil) != (compact[k] == nil) {
				t.Fatalf("Profile %d: nil %v, compacted nil %v", k, prs[k] == nil, compact[k] == nil)
			}
		}
		for _, place := range []func(Request, []Node, Cluster, Weights) (Decision, error){Place, pl.Place} {
			got, gotErr := place(s.req, nodes, s.cl, s.w)
			sameDecision(t, want, wantErr, got, gotErr,
				"compacted Profiles decide otherwise (-records +compacted):\n%s", "compacted Profiles explain otherwise")
		}
	})
}

// TestCompactManyNodes: over realistic nodes, above the radix sorts'
// threshold, compacted Profiles decide as those they were copied from.
func TestCompactManyNodes(t *testing.T) {
	req, cl, w := benchRequest(), Cluster{RevokedNodes: []string{"n-00000000000000ff"}}, DefaultWeights()
	nodes := prepared(NewSymbols(), benchNodes(400))
	want, err := Place(req, nodes, cl, w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Place(req, compacted(nodes), cl, w)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, rejText); diff != "" {
		t.Fatalf("compacted Profiles decide otherwise (-given +compacted):\n%s", diff)
	}
	if want.Explain() != got.Explain() {
		t.Fatal("compacted Profiles explain otherwise")
	}
}

// TestPlacerManyNodes: above the radix sorts' threshold, which the
// generated scenarios never reach, a Placer decides as Place over the
// same nodes twice, shuffled, with fewer nodes, and with a repeated id.
func TestPlacerManyNodes(t *testing.T) {
	var pl Placer
	s := scenario{req: benchRequest(), nodes: prepared(NewSymbols(), benchNodes(600)),
		cl: Cluster{RevokedNodes: []string{"n-00000000000000ff"}}, w: DefaultWeights()}
	first := samePlace(t, &pl, s, s.nodes, "first")
	kept := first.Explain()
	samePlace(t, &pl, s, s.nodes, "again")
	shuffled := slices.Clone(s.nodes)
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
	samePlace(t, &pl, s, shuffled, "shuffled")
	samePlace(t, &pl, s, shuffled[:300], "fewer")
	repeated := slices.Clone(shuffled)
	repeated[400].ID = repeated[17].ID
	samePlace(t, &pl, s, repeated, "repeated id")
	samePlace(t, &pl, s, repeated, "repeated id again")
	samePlace(t, &pl, s, s.nodes, "back")
	if first.Explain() != kept {
		t.Fatal("a Decision kept changed with the Placer's later decisions")
	}
}

// TestPlacerConcurrent: decisions made at once by one Placer (one with
// its memory, the others with their own) are Place's (race detector).
func TestPlacerConcurrent(t *testing.T) {
	var pl Placer
	s := scenario{req: benchRequest(), nodes: prepared(NewSymbols(), benchNodes(300)), w: DefaultWeights()}
	want, err := Place(s.req, s.nodes, s.cl, s.w)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Decision)
	for range 4 {
		go func() {
			d, _ := pl.Place(s.req, s.nodes, s.cl, s.w)
			done <- d
		}()
	}
	for range 4 {
		if diff := cmp.Diff(want, <-done, rejText); diff != "" {
			t.Fatalf("a concurrent decision differs (-Place +Placer):\n%s", diff)
		}
	}
}
