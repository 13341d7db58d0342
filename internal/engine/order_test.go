package engine

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/grammar"
)

// TestSortByID: the radix sort on keys (and the comparison sort below
// radixMin) orders ids exactly as strings.Compare does, for ids that
// share long prefixes, differ only after eight bytes, are prefixes of one
// another, or are shorter than a key.
func TestSortByID(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, n := range []int{0, 1, 2, 7, radixMin - 1, radixMin, 1000, 3000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			nodes := make([]Node, n)
			seen := map[string]bool{}
			for i := range nodes {
				for {
					var id string
					switch rng.IntN(5) {
					case 0: // alike beyond the key: only the tail differs
						id = fmt.Sprintf("rack-7/node-aaaaaaaaaa-%d", rng.IntN(50))
					case 1: // short after the common prefix
						id = "rack-7/" + string(rune('a'+rng.IntN(26)))
					case 2: // prefixes of one another
						id = "rack-7/node-" + strings.Repeat("b", rng.IntN(12))
					default:
						id = fmt.Sprintf("rack-7/%016x", rng.Uint64())
					}
					if !seen[id] {
						seen[id] = true
						nodes[i].ID = id
						break
					}
				}
			}
			o := sortByID(nodes, nil, nil)
			got := make([]string, len(o.refs))
			for k, r := range o.refs {
				got[k] = nodes[r.i].ID
			}
			want := make([]string, len(nodes))
			for i := range nodes {
				want[i] = nodes[i].ID
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("order differs from strings.Compare")
			}
			for _, id := range want {
				if i := o.index(nodes, id); i < 0 || nodes[i].ID != id {
					t.Fatalf("index(%q) = %d", id, i)
				}
			}
			if i := o.index(nodes, "rack-7/zz-not-there"); i >= 0 {
				t.Fatalf("index of a missing id = %d", i)
			}
		})
	}
}

// TestRankOrder: a lower key never ranks a candidate above one of a
// better tier or a higher score, down to adjacent floats; equal keys
// only for scores that are equal or adjacent.
func TestRankOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for range 100000 {
		ta, tb := Tier(rng.IntN(3)), Tier(rng.IntN(3))
		a := rng.Float64() * 1000
		var b float64
		switch rng.IntN(4) {
		case 0:
			b = a
		case 1:
			b = math.Nextafter(a, math.Inf(1))
		case 2:
			b = math.Nextafter(a, 0)
		default:
			b = rng.Float64() * 1000
		}
		ref := cmp.Or(cmp.Compare(ta, tb), cmp.Compare(b, a)) // tier, then score descending
		ka, kb := rankOrder(ta, a), rankOrder(tb, b)
		switch {
		case ref < 0 && ka > kb, ref > 0 && ka < kb, ref == 0 && ka != kb:
			t.Fatalf("tier %d score %v: key %x; tier %d score %v: key %x", ta, a, ka, tb, b, kb)
		}
	}
	if rankOrder(TierNative, 0) != rankOrder(TierNative, math.Copysign(0, -1)) {
		t.Errorf("0 and -0 have different keys")
	}
}

// TestRankingAtScale: with more nodes than radixMin, the candidates are
// the eligible by tier, then total score descending, then node id, then
// the rejected by node id.
func TestRankingAtScale(t *testing.T) {
	req := benchRequest()
	req.AllowEmulated = true
	req.Variants[2].Execution = Emulated // some emulated tier
	nodes := benchNodes(1500)
	for i := range nodes {
		if i%7 == 0 { // many equal scores, so ties fall to the id
			nodes[i].Capabilities = []Capability{{ID: "os.linux", Provenance: "probed"}, {ID: "cpu.arch.amd64", Provenance: "probed"},
				{ID: "runtime.llamacpp", Provenance: "probed", Attrs: []Attr{{"version", grammar.IntValue(4200)}}},
				{ID: "cpu.cores", Provenance: "probed", Attrs: []Attr{{"count", grammar.IntValue(64)}}}, {ID: "cpu.features.avx512", Provenance: "probed"}}
		}
	}
	d, err := Place(req, nodes, Cluster{}, DefaultWeights())
	if err != nil {
		t.Fatal(err)
	}
	eligible := 0
	for eligible < len(d.Candidates) && d.Candidates[eligible].Eligible() {
		eligible++
	}
	if eligible < radixMin || len(d.Candidates)-eligible < radixMin {
		t.Fatalf("%d eligible of %d: the test needs more of each", eligible, len(d.Candidates))
	}
	for k := 1; k < len(d.Candidates); k++ {
		a, b := &d.Candidates[k-1], &d.Candidates[k]
		var ok bool
		switch {
		case k < eligible:
			c := cmp.Or(cmp.Compare(a.Tier, b.Tier), cmp.Compare(b.Score.Total, a.Score.Total), strings.Compare(a.Node, b.Node))
			ok = c < 0
		case k == eligible:
			ok = !b.Eligible()
		default:
			ok = a.Node < b.Node && !b.Eligible()
		}
		if !ok {
			t.Fatalf("candidates %d (%s, tier %s, score %v) and %d (%s, tier %s, score %v) out of order",
				k-1, a.Node, a.Tier, a.Score.Total, k, b.Node, b.Tier, b.Score.Total)
		}
	}
}

// TestPrintableASCII: the word-at-a-time check agrees with grammar's
// byte-at-a-time one, for every byte value at every position of short
// and long texts.
func TestPrintableASCII(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 16, 23} {
		base := []byte(strings.Repeat("n", n))
		for pos := range n {
			for b := range 256 {
				s := slices.Clone(base)
				s[pos] = byte(b)
				if got, want := printableASCII(string(s)), grammar.PrintableASCII(string(s)); got != want {
					t.Fatalf("%q: %v, want %v", s, got, want)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		s := make([]byte, rng.IntN(40))
		for i := range s {
			s[i] = byte(0x18 + rng.IntN(0x70))
		}
		if got, want := printableASCII(string(s)), grammar.PrintableASCII(string(s)); got != want {
			t.Fatalf("%q: %v, want %v", s, got, want)
		}
	}
}
