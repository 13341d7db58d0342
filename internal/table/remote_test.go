package table

import (
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRoleAdvertsIsAMap: a role's advertisements, kept in a slice with an
// index, hold what a map of them would after any puts and removals in any
// order: the entry moved into a removed one's place stays found.
func TestRoleAdvertsIsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	r := &roleAdverts{index: make(map[string]int)}
	want := map[string]float64{}
	for step := range 5000 {
		sender := "n-" + strconv.Itoa(rng.IntN(8))
		if rng.IntN(2) == 0 {
			load := float64(step)
			r.put(sender, remoteEntry{cand: candidate{node: sender, load: load}})
			want[sender] = load
		} else {
			_, had := want[sender]
			if got := r.remove(sender); got != had {
				t.Fatalf("step %d: remove(%s) = %v, want %v", step, sender, got, had)
			}
			delete(want, sender)
		}
		got := map[string]float64{}
		for _, e := range r.entries {
			got[e.cand.node] = e.cand.load
		}
		if diff := cmp.Diff(want, got); diff != "" || len(r.entries) != len(want) || len(r.index) != len(want) {
			t.Fatalf("step %d: entries (-want +got):\n%s", step, diff)
		}
		for s := range maps.Keys(want) {
			if e, ok := r.get(s); !ok || e.cand.load != want[s] {
				t.Fatalf("step %d: get(%s) = %+v, %v, want load %v", step, s, e, ok, want[s])
			}
		}
	}
}
