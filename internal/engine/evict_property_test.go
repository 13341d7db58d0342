package engine

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var (
	genEvictBytes = []uint64{0, gib, 2 * gib, 4 * gib}
	genDeclared   = []uint64{gib, 0, gib, 2 * gib, 4 * gib}
	genCapacity   = []uint64{0, 4 * gib, 8 * gib, 12 * gib}
	genReady      = []time.Duration{-1, time.Hour, 10 * time.Second} // -1: still starting
	genLast       = []time.Duration{-1, time.Second, 10 * time.Minute}
)

// genEvictRequest draws targets and residents that collide often: small
// capacities, every rule with a fair chance, equal costs.
// With permissive, nearly every instance may be evicted (for the greedy
// search, which needs many).
func genEvictRequest(maxPerNode int, permissive bool) *rapid.Generator[EvictRequest] {
	return rapid.Custom(func(t *rapid.T) EvictRequest {
		r := EvictRequest{Kind: "inference", Name: "want", Now: t0, Policy: DefaultEvictPolicy()}
		if rapid.Bool().Draw(t, "waited") {
			r.DemandSince = t0.Add(-time.Duration(rapid.SampledFrom([]int{1, 40}).Draw(t, "waited_s")) * time.Second)
		}
		nNodes := rapid.SampledFrom([]int{1, 1, 2, 3, 0}).Draw(t, "nodes")
		id := 0
		for k := range nNodes {
			node := fmt.Sprintf("n%d", k)
			unified := rapid.Bool().Draw(t, "unified")
			r.Targets = append(r.Targets, EvictTarget{Node: node, Variant: "v",
				Tier:   rapid.SampledFrom([]Tier{TierNative, TierNative, TierEmulated}).Draw(t, "tier"),
				Demand: Resources{HostBytes: rapid.SampledFrom(genEvictBytes[1:]).Draw(t, "dh"), AccelBytes: rapid.SampledFrom(genEvictBytes).Draw(t, "da")}})
			n := EvictNode{ID: node, Unified: unified,
				Capacity: Resources{HostBytes: rapid.SampledFrom(genCapacity).Draw(t, "ch"), AccelBytes: rapid.SampledFrom(genCapacity).Draw(t, "ca")},
				Used:     Resources{HostBytes: rapid.SampledFrom(genEvictBytes).Draw(t, "pending_h"), AccelBytes: rapid.SampledFrom(genEvictBytes).Draw(t, "pending_a")}}
			minPerNode := 0
			if permissive {
				minPerNode = maxPerNode / 2
			}
			for range rapid.IntRange(minPerNode, maxPerNode).Draw(t, "residents") {
				res := Resident{ID: fmt.Sprintf("i%02d", id), Kind: "inference", Node: node,
					Workload:     rapid.SampledFrom([]string{"A", "B", "C", "want"}).Draw(t, "workload"),
					Declared:     Resources{HostBytes: rapid.SampledFrom(genDeclared).Draw(t, "h"), AccelBytes: rapid.SampledFrom(genDeclared).Draw(t, "a")},
					OnDemand:     rapid.IntRange(0, 5).Draw(t, "on_demand") > 0,
					InFlight:     rapid.SampledFrom([]int{0, 0, 0, 0, 2}).Draw(t, "in_flight"),
					MinResidency: rapid.SampledFrom([]time.Duration{0, 0, 30 * time.Second}).Draw(t, "min_residency"),
					EvictCost:    rapid.SampledFrom([]int{0, 3, 10, 12, 20, 25}).Draw(t, "evict_cost"),
					LoadTime:     rapid.SampledFrom([]time.Duration{0, 5 * time.Second, 10 * time.Second}).Draw(t, "load"),
				}
				id++
				if permissive && rapid.IntRange(0, 9).Draw(t, "permit") > 0 {
					res.OnDemand, res.InFlight, res.MinResidency, res.Workload = true, 0, 0, "A"
				}
				if d := rapid.SampledFrom(genReady).Draw(t, "ready"); d >= 0 {
					res.ReadySince = t0.Add(-d)
					if l := rapid.SampledFrom(genLast).Draw(t, "last"); l >= 0 {
						res.LastRequest = t0.Add(-l)
					}
				}
				n.Used.HostBytes += res.Declared.HostBytes
				n.Used.AccelBytes += res.Declared.AccelBytes
				r.Residents = append(r.Residents, res)
			}
			// Mostly a capacity a little short of what is used plus the
			// demand, so that evictions are the common case.
			if rapid.IntRange(0, 3).Draw(t, "relative") > 0 {
				d := poolsOf(r.Targets[k].Demand, unified)
				u := poolsOf(n.Used, unified)
				for p, c := range []*uint64{&n.Capacity.HostBytes, &n.Capacity.AccelBytes} {
					short := rapid.SampledFrom([]uint64{0, gib, 2 * gib, 4 * gib, 8 * gib}).Draw(t, "short")
					if s := u[p] + d[p]; s > short {
						*c = s - short
					} else {
						*c = 0
					}
				}
			}
			r.Nodes = append(r.Nodes, n)
		}
		return r
	})
}

// mayEvict is the rules, written apart from Evict's.
func mayEvict(r EvictRequest, res Resident) bool {
	if res.Kind == r.Kind && res.Workload == r.Name || !res.OnDemand || res.ReadySince.IsZero() || res.InFlight > 0 {
		return false
	}
	if r.Now.Sub(res.ReadySince) < res.MinResidency {
		return false
	}
	waited := time.Duration(0)
	if !r.DemandSince.IsZero() {
		waited = r.Now.Sub(r.DemandSince)
	}
	recent := !res.LastRequest.IsZero() && r.Now.Sub(res.LastRequest) < r.Policy.Grace
	return !recent || waited >= r.Policy.Patience
}

// fitsAfter reports whether target t fits node n once set is evicted.
func fitsAfter(n EvictNode, t EvictTarget, set []Resident) bool {
	used := n.Used
	for _, res := range set {
		used.HostBytes -= res.Declared.HostBytes
		used.AccelBytes -= res.Declared.AccelBytes
	}
	if n.Unified {
		d := t.Demand.HostBytes + t.Demand.AccelBytes
		return d == 0 || used.HostBytes+used.AccelBytes+d <= n.Capacity.HostBytes
	}
	return (t.Demand.HostBytes == 0 || used.HostBytes+t.Demand.HostBytes <= n.Capacity.HostBytes) &&
		(t.Demand.AccelBytes == 0 || used.AccelBytes+t.Demand.AccelBytes <= n.Capacity.AccelBytes)
}

// cheapest is the least cost of an evictable set that makes t fit on n,
// by trying every subset; ok is false when none does.
func cheapest(r EvictRequest, n EvictNode, t EvictTarget) (cost time.Duration, ok bool) {
	var allowed []Resident
	for _, res := range r.Residents {
		if res.Node == n.ID && mayEvict(r, res) {
			allowed = append(allowed, res)
		}
	}
	for mask := 0; mask < 1<<len(allowed); mask++ {
		var set []Resident
		var c time.Duration
		for b, res := range allowed {
			if mask&(1<<b) != 0 {
				set = append(set, res)
				c += EvictCost(&res, r.Now, r.Policy)
			}
		}
		if fitsAfter(n, t, set) && (!ok || c < cost) {
			cost, ok = c, true
		}
	}
	return cost, ok
}

// TestEvictProperties: the chosen set always frees enough, never holds a
// forbidden instance, costs no more than any other valid set on any node
// of its tier, and "cannot" means no valid set exists anywhere.
func TestEvictProperties(t *testing.T) {
	// Each check draws a batch: the cases that tell the cheapest set from
	// another valid one are a few in a thousand.
	rapid.Check(t, func(t *rapid.T) {
		permissive := rapid.Bool().Draw(t, "permissive")
		for _, r := range rapid.SliceOfN(genEvictRequest(6, permissive), 10, 40).Draw(t, "requests") {
			checkEvictProperties(t, r)
		}
	})
}

func checkEvictProperties(t *rapid.T, r EvictRequest) {
	{
		ev, err := Evict(r)
		if err != nil {
			t.Fatal(err)
		}
		// The same request, its nodes and residents in another order, gives
		// the same eviction: only the targets' order (the rank) counts.
		other := r
		other.Nodes, other.Residents = slices.Clone(r.Nodes), slices.Clone(r.Residents)
		slices.Reverse(other.Nodes)
		slices.Reverse(other.Residents)
		again, err := Evict(other)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ev.Lines(), again.Lines()) {
			t.Fatalf("the same request in another order gave another eviction:\n%s\n%s", ev.Explain(), again.Explain())
		}
		type best struct {
			tier Tier
			cost time.Duration
		}
		var feasible []best
		for k, tg := range r.Targets {
			if c, ok := cheapest(r, r.Nodes[k], tg); ok {
				feasible = append(feasible, best{tg.Tier, c})
			}
		}
		if ev.Outcome == EvictCannot {
			if len(feasible) > 0 {
				t.Fatalf("cannot, but %d nodes can be made to fit\n%s", len(feasible), ev.Explain())
			}
			return
		}
		k := slices.IndexFunc(r.Targets, func(tg EvictTarget) bool { return tg.Node == ev.Node })
		var set []Resident
		for _, id := range ev.Evict {
			i := slices.IndexFunc(r.Residents, func(res Resident) bool { return res.ID == id })
			res := r.Residents[i]
			if res.Node != ev.Node || !mayEvict(r, res) {
				t.Fatalf("evicts %s on %s, which may not be evicted\n%s", id, res.Node, ev.Explain())
			}
			set = append(set, res)
		}
		if !fitsAfter(r.Nodes[k], r.Targets[k], set) {
			t.Fatalf("the set frees too little on %s\n%s", ev.Node, ev.Explain())
		}
		if (ev.Outcome == EvictNotNeeded) != (len(set) == 0) {
			t.Fatalf("outcome %v with %d evicted", ev.Outcome, len(set))
		}
		var cost time.Duration
		for _, res := range set {
			cost += EvictCost(&res, r.Now, r.Policy)
		}
		if cost != ev.Cost {
			t.Fatalf("cost %v, the set's %v", ev.Cost, cost)
		}
		for _, f := range feasible {
			if f.tier < r.Targets[k].Tier || f.tier == r.Targets[k].Tier && f.cost < cost {
				t.Fatalf("chose cost %v tier %v, but a set of cost %v tier %v exists\n%s", cost, r.Targets[k].Tier, f.cost, f.tier, ev.Explain())
			}
		}
	}
}

// TestEvictGreedyProperties: beyond EvictExactMax, the greedy set still
// frees enough and never holds a forbidden instance, and each of its
// instances is needed.
func TestEvictGreedyProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genEvictRequest(30, true).Draw(t, "request")
		ev, err := Evict(r)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Outcome == EvictCannot {
			for k, tg := range r.Targets {
				var all []Resident
				for _, res := range r.Residents {
					if res.Node == tg.Node && mayEvict(r, res) {
						all = append(all, res)
					}
				}
				if fitsAfter(r.Nodes[k], tg, all) {
					t.Fatalf("cannot, but evicting everything allowed on %s fits\n%s", tg.Node, ev.Explain())
				}
			}
			return
		}
		k := slices.IndexFunc(r.Targets, func(tg EvictTarget) bool { return tg.Node == ev.Node })
		var set []Resident
		for _, id := range ev.Evict {
			i := slices.IndexFunc(r.Residents, func(res Resident) bool { return res.ID == id })
			if !mayEvict(r, r.Residents[i]) || r.Residents[i].Node != ev.Node {
				t.Fatalf("evicts %s, which may not be evicted", id)
			}
			set = append(set, r.Residents[i])
		}
		if !fitsAfter(r.Nodes[k], r.Targets[k], set) {
			t.Fatalf("the set frees too little on %s\n%s", ev.Node, ev.Explain())
		}
		for i := range set {
			if fitsAfter(r.Nodes[k], r.Targets[k], slices.Delete(slices.Clone(set), i, i+1)) {
				t.Fatalf("%s is evicted but not needed\n%s", set[i].ID, ev.Explain())
			}
		}
	})
}
