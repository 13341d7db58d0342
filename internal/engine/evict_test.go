package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// t0 is the time of the eviction tests' decisions.
var t0 = time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)

// idleRes is an idle, ready on-demand instance of workload w on node,
// declaring host bytes, ready an hour ago, last used ten minutes ago,
// loading in 10 s.
func idleRes(id, w, node string, host uint64) Resident {
	return Resident{ID: id, Kind: "inference", Workload: w, Node: node, Declared: Resources{HostBytes: host},
		OnDemand: true, ReadySince: t0.Add(-time.Hour), LastRequest: t0.Add(-10 * time.Minute),
		MinResidency: 30 * time.Second, LoadTime: 10 * time.Second}
}

// evictReq asks room for 4 GiB of host memory for inference/want on the
// targets, in order, each a non-unified node of 8 GiB holding what its
// residents declare.
func evictReq(targets []string, residents ...Resident) EvictRequest {
	r := EvictRequest{Kind: "inference", Name: "want", Now: t0, Residents: residents, Policy: DefaultEvictPolicy()}
	for _, n := range targets {
		r.Targets = append(r.Targets, EvictTarget{Node: n, Variant: "cpu", Demand: Resources{HostBytes: 4 * gib}})
		var used uint64
		for _, res := range residents {
			if res.Node == n {
				used += res.Declared.HostBytes
			}
		}
		r.Nodes = append(r.Nodes, EvictNode{ID: n, Capacity: Resources{HostBytes: 8 * gib}, Used: Resources{HostBytes: used}})
	}
	return r
}

// evictSummary is what the table tests compare.
type evictSummary struct {
	Outcome EvictOutcome
	Node    string
	Evict   []string
	Reason  CannotReason
	RetryAt time.Time
	Keeps   map[string]KeepCode
}

func summarize(ev Eviction) evictSummary {
	s := evictSummary{Outcome: ev.Outcome, Node: ev.Node, Evict: ev.Evict, Reason: ev.Reason, RetryAt: ev.RetryAt,
		Keeps: map[string]KeepCode{}}
	for _, v := range ev.Residents {
		if v.Keep != "" {
			s.Keeps[v.ID] = v.Keep
		}
	}
	return s
}

func TestEvictRules(t *testing.T) {
	with := func(r Resident, f func(*Resident)) Resident { f(&r); return r }
	tests := []struct {
		name string
		give EvictRequest
		want evictSummary
	}{{
		name: "room left: no eviction",
		give: evictReq([]string{"n1"}, idleRes("a", "A", "n1", 4*gib)),
		want: evictSummary{Outcome: EvictNotNeeded, Node: "n1", Keeps: map[string]KeepCode{}},
	}, {
		name: "an idle on-demand instance is evicted",
		give: evictReq([]string{"n1"}, idleRes("a", "A", "n1", 8*gib)),
		want: evictSummary{Outcome: EvictChosen, Node: "n1", Evict: []string{"a"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "never with a request in flight",
		give: evictReq([]string{"n1"}, with(idleRes("a", "A", "n1", 8*gib), func(r *Resident) { r.InFlight = 1 })),
		want: evictSummary{Outcome: EvictCannot, Reason: CannotBusy, Keeps: map[string]KeepCode{"a": KeepInFlight}},
	}, {
		name: "never inside min_residency: retry when it lapses",
		give: evictReq([]string{"n1"}, with(idleRes("a", "A", "n1", 8*gib), func(r *Resident) {
			r.ReadySince, r.LastRequest = t0.Add(-10*time.Second), time.Time{}
		})),
		want: evictSummary{Outcome: EvictCannot, Reason: CannotBusy, RetryAt: t0.Add(20 * time.Second),
			Keeps: map[string]KeepCode{"a": KeepMinResidency}},
	}, {
		name: "never a workload not on demand",
		give: evictReq([]string{"n1"}, with(idleRes("a", "A", "n1", 8*gib), func(r *Resident) { r.OnDemand = false })),
		want: evictSummary{Outcome: EvictCannot, Reason: CannotNotEvictable, Keeps: map[string]KeepCode{"a": KeepNotOnDemand}},
	}, {
		name: "never one still starting",
		give: evictReq([]string{"n1"}, with(idleRes("a", "A", "n1", 8*gib), func(r *Resident) { r.ReadySince, r.LastRequest = time.Time{}, time.Time{} })),
		want: evictSummary{Outcome: EvictCannot, Reason: CannotBusy, Keeps: map[string]KeepCode{"a": KeepStarting}},
	}, {
		name: "never the demanded workload's own instance",
		give: evictReq([]string{"n1"}, idleRes("a", "want", "n1", 8*gib)),
		want: evictSummary{Outcome: EvictCannot, Reason: CannotNotEvictable, Keeps: map[string]KeepCode{"a": KeepSameWorkload}},
	}, {
		name: "a recent request keeps it for the grace",
		give: evictReq([]string{"n1"}, with(idleRes("a", "A", "n1", 8*gib), func(r *Resident) { r.LastRequest = t0.Add(-time.Second) })),
		want: evictSummary{Outcome: EvictCannot, Reason: CannotBusy, RetryAt: t0.Add(DefaultEvictGrace - time.Second),
			Keeps: map[string]KeepCode{"a": KeepRecentRequest}},
	}, {
		name: "past the patience a recent request no longer keeps it",
		give: func() EvictRequest {
			r := evictReq([]string{"n1"}, with(idleRes("a", "A", "n1", 8*gib), func(r *Resident) { r.LastRequest = t0.Add(-time.Second) }))
			r.DemandSince = t0.Add(-DefaultEvictPatience)
			return r
		}(),
		want: evictSummary{Outcome: EvictChosen, Node: "n1", Evict: []string{"a"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "the grace ends at the patience",
		give: func() EvictRequest {
			r := evictReq([]string{"n1"}, with(idleRes("a", "A", "n1", 8*gib), func(r *Resident) { r.LastRequest = t0.Add(-time.Second) }))
			r.Policy.Grace = 10 * time.Second
			r.DemandSince = t0.Add(-DefaultEvictPatience + 2*time.Second)
			return r
		}(),
		want: evictSummary{Outcome: EvictCannot, Reason: CannotBusy, RetryAt: t0.Add(2 * time.Second),
			Keeps: map[string]KeepCode{"a": KeepRecentRequest}},
	}, {
		name: "the operator's evict_cost orders them",
		give: evictReq([]string{"n1"},
			with(idleRes("a", "A", "n1", 4*gib), func(r *Resident) { r.EvictCost = 100 }),
			with(idleRes("b", "B", "n1", 4*gib), func(r *Resident) { r.EvictCost = 50 })),
		want: evictSummary{Outcome: EvictChosen, Node: "n1", Evict: []string{"b"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "the longer load costs more",
		give: evictReq([]string{"n1"},
			with(idleRes("a", "A", "n1", 4*gib), func(r *Resident) { r.LoadTime = 5 * time.Second }),
			with(idleRes("b", "B", "n1", 4*gib), func(r *Resident) { r.LoadTime = 20 * time.Second })),
		want: evictSummary{Outcome: EvictChosen, Node: "n1", Evict: []string{"a"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "the recently used one costs more",
		give: evictReq([]string{"n1"},
			with(idleRes("a", "A", "n1", 4*gib), func(r *Resident) { r.LastRequest = t0.Add(-time.Minute) }),
			with(idleRes("b", "B", "n1", 4*gib), func(r *Resident) { r.LastRequest = t0.Add(-time.Hour) })),
		want: evictSummary{Outcome: EvictChosen, Node: "n1", Evict: []string{"b"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "two cheap ones rather than one dear one",
		give: evictReq([]string{"n1"},
			with(idleRes("a", "A", "n1", 4*gib), func(r *Resident) { r.EvictCost = 100 }),
			with(idleRes("b", "B", "n1", 2*gib), func(r *Resident) { r.EvictCost = 30 }),
			with(idleRes("c", "C", "n1", 2*gib), func(r *Resident) { r.EvictCost = 30 })),
		want: evictSummary{Outcome: EvictChosen, Node: "n1", Evict: []string{"b", "c"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "one dearer one rather than two cheaper ones that cost more together",
		give: evictReq([]string{"n1"},
			with(idleRes("a", "A", "n1", 2*gib), func(r *Resident) { r.EvictCost = 10 }),
			with(idleRes("b", "B", "n1", 2*gib), func(r *Resident) { r.EvictCost = 11 }),
			with(idleRes("c", "C", "n1", 4*gib), func(r *Resident) { r.EvictCost = 12 })),
		want: evictSummary{Outcome: EvictChosen, Node: "n1", Evict: []string{"c"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "equal cost: fewer instances, then ids first",
		give: evictReq([]string{"n1"},
			with(idleRes("d", "D", "n1", 4*gib), func(r *Resident) { r.EvictCost = 60 }),
			with(idleRes("c", "C", "n1", 2*gib), func(r *Resident) { r.EvictCost = 30 }),
			with(idleRes("b", "B", "n1", 2*gib), func(r *Resident) { r.EvictCost = 30 })),
		want: evictSummary{Outcome: EvictChosen, Node: "n1", Evict: []string{"d"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "equal cost and count: the ids that sort first",
		give: evictReq([]string{"n1"},
			with(idleRes("y", "Y", "n1", 4*gib), func(r *Resident) { r.EvictCost = 60 }),
			with(idleRes("x", "X", "n1", 4*gib), func(r *Resident) { r.EvictCost = 60 })),
		want: evictSummary{Outcome: EvictChosen, Node: "n1", Evict: []string{"x"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "the cheaper node wins over the better-ranked",
		give: evictReq([]string{"n1", "n2"},
			with(idleRes("a", "A", "n1", 8*gib), func(r *Resident) { r.EvictCost = 90 }),
			with(idleRes("b", "B", "n2", 8*gib), func(r *Resident) { r.EvictCost = 10 })),
		want: evictSummary{Outcome: EvictChosen, Node: "n2", Evict: []string{"b"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "equal cost: the better-ranked node",
		give: evictReq([]string{"n2", "n1"}, idleRes("a", "A", "n1", 8*gib), idleRes("b", "B", "n2", 8*gib)),
		want: evictSummary{Outcome: EvictChosen, Node: "n2", Evict: []string{"b"}, Keeps: map[string]KeepCode{}},
	}, {
		name: "a node with room beats any eviction",
		give: evictReq([]string{"n1", "n2"}, idleRes("a", "A", "n1", 8*gib), idleRes("b", "B", "n2", 2*gib)),
		want: evictSummary{Outcome: EvictNotNeeded, Node: "n2", Keeps: map[string]KeepCode{}},
	}, {
		name: "kept ones stay, the rest is chosen around them",
		give: evictReq([]string{"n1"},
			with(idleRes("a", "A", "n1", 4*gib), func(r *Resident) { r.InFlight, r.EvictCost = 2, 1 }),
			with(idleRes("b", "B", "n1", 4*gib), func(r *Resident) { r.EvictCost = 500 })),
		want: evictSummary{Outcome: EvictChosen, Node: "n1", Evict: []string{"b"}, Keeps: map[string]KeepCode{"a": KeepInFlight}},
	}, {
		name: "too large for every node",
		give: func() EvictRequest {
			r := evictReq([]string{"n1"}, idleRes("a", "A", "n1", 8*gib))
			r.Targets[0].Demand.HostBytes = 9 * gib
			return r
		}(),
		want: evictSummary{Outcome: EvictCannot, Reason: CannotTooLarge, Keeps: map[string]KeepCode{}},
	}, {
		name: "nowhere to go",
		give: evictReq(nil, idleRes("a", "A", "n1", 8*gib)),
		want: evictSummary{Outcome: EvictCannot, Reason: CannotNoTargets, Keeps: map[string]KeepCode{}},
	}, {
		name: "busy beats not evictable",
		give: evictReq([]string{"n1", "n2"},
			with(idleRes("a", "A", "n1", 8*gib), func(r *Resident) { r.OnDemand = false }),
			with(idleRes("b", "B", "n2", 8*gib), func(r *Resident) { r.InFlight = 1 })),
		want: evictSummary{Outcome: EvictCannot, Reason: CannotBusy,
			Keeps: map[string]KeepCode{"a": KeepNotOnDemand, "b": KeepInFlight}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := Evict(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, summarize(ev)); diff != "" {
				t.Errorf("(-want +got)\n%s\n%s", diff, ev.Explain())
			}
			checkFits(t, tt.give, ev)
		})
	}
}

// checkFits fails when the eviction leaves the chosen node given more
// than its capacity by declared resources.
func checkFits(t *testing.T, r EvictRequest, ev Eviction) {
	t.Helper()
	if ev.Outcome == EvictCannot {
		return
	}
	var node EvictNode
	for _, n := range r.Nodes {
		if n.ID == ev.Node {
			node = n
		}
	}
	var target EvictTarget
	for _, tg := range r.Targets {
		if tg.Node == ev.Node {
			target = tg
		}
	}
	used := node.Used
	for _, id := range ev.Evict {
		for _, res := range r.Residents {
			if res.ID == id {
				used.HostBytes -= res.Declared.HostBytes
				used.AccelBytes -= res.Declared.AccelBytes
			}
		}
	}
	if node.Unified {
		if d := target.Demand.HostBytes + target.Demand.AccelBytes; d > 0 && used.HostBytes+used.AccelBytes+d > node.Capacity.HostBytes {
			t.Errorf("node %s: %d used + %d demanded > %d", node.ID, used.HostBytes+used.AccelBytes, d, node.Capacity.HostBytes)
		}
		return
	}
	if d := target.Demand.HostBytes; d > 0 && used.HostBytes+d > node.Capacity.HostBytes {
		t.Errorf("node %s: host %d used + %d demanded > %d", node.ID, used.HostBytes, d, node.Capacity.HostBytes)
	}
	if d := target.Demand.AccelBytes; d > 0 && used.AccelBytes+d > node.Capacity.AccelBytes {
		t.Errorf("node %s: accel %d used + %d demanded > %d", node.ID, used.AccelBytes, d, node.Capacity.AccelBytes)
	}
}

func TestEvictTierFirst(t *testing.T) {
	r := evictReq([]string{"n1", "n2"}, idleRes("a", "A", "n1", 8*gib))
	r.Targets[1].Tier = TierEmulated // n2 is empty, but emulated
	ev, err := Evict(r)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Outcome != EvictChosen || ev.Node != "n1" {
		t.Errorf("got %v on %s, want an eviction on native n1\n%s", ev.Outcome, ev.Node, ev.Explain())
	}
}

func TestEvictUnifiedPool(t *testing.T) {
	// 16 GiB unified: 6 host + 6 accel used, demand 2 + 4: 2 GiB short.
	r := EvictRequest{Kind: "inference", Name: "want", Now: t0, Policy: DefaultEvictPolicy(),
		Targets: []EvictTarget{{Node: "mac", Variant: "metal", Demand: Resources{HostBytes: 2 * gib, AccelBytes: 4 * gib}}},
		Nodes: []EvictNode{{ID: "mac", Unified: true, Capacity: Resources{HostBytes: 16 * gib},
			Used: Resources{HostBytes: 6 * gib, AccelBytes: 6 * gib}}},
		Residents: []Resident{
			func() Resident {
				r := idleRes("big", "B", "mac", 4*gib)
				r.Declared.AccelBytes = 4 * gib
				r.EvictCost = 40
				return r
			}(),
			func() Resident {
				r := idleRes("gpu", "G", "mac", 0)
				r.Declared.AccelBytes = 2 * gib
				r.EvictCost = 20
				return r
			}(),
		},
	}
	ev, err := Evict(r)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpu"}, ev.Evict); diff != "" {
		t.Errorf("(-want +got)\n%s\n%s", diff, ev.Explain())
	}
	if ev.Nodes[0].Need != (Resources{HostBytes: 2 * gib}) {
		t.Errorf("need = %+v, want 2 GiB in the one pool", ev.Nodes[0].Need)
	}
	checkFits(t, r, ev)
}

func TestEvictCostFormula(t *testing.T) {
	p := DefaultEvictPolicy()
	res := idleRes("a", "A", "n1", gib)
	for _, tt := range []struct {
		name string
		idle time.Duration
		want time.Duration
	}{
		{"used just now costs twice its load", 0, 20 * time.Second},
		{"one half-life idle", p.RecencyHalfLife, 15 * time.Second},
		{"two half-lives idle", 2 * p.RecencyHalfLife, 12500 * time.Millisecond},
	} {
		res.LastRequest = t0.Add(-tt.idle)
		if got := EvictCost(&res, t0, p); got != tt.want {
			t.Errorf("%s: cost %v, want %v", tt.name, got, tt.want)
		}
	}
	res.LoadTime = 0
	res.LastRequest = t0
	if got := EvictCost(&res, t0, p); got != 2*p.UnmeasuredLoad {
		t.Errorf("unmeasured: cost %v, want %v", got, 2*p.UnmeasuredLoad)
	}
	res.EvictCost = 7
	if got := EvictCost(&res, t0, p); got != 7*time.Second {
		t.Errorf("evict_cost 7: cost %v, want 7s", got)
	}
}

func TestEvictExplains(t *testing.T) {
	r := evictReq([]string{"n1", "n2"},
		Resident{ID: "a-n1", Kind: "inference", Workload: "A", Node: "n1", Declared: Resources{HostBytes: 4 * gib},
			OnDemand: true, ReadySince: t0.Add(-time.Hour), LastRequest: t0.Add(-5 * time.Minute), LoadTime: 10 * time.Second},
		Resident{ID: "b-n1", Kind: "inference", Workload: "B", Node: "n1", Declared: Resources{HostBytes: 2 * gib},
			OnDemand: true, ReadySince: t0.Add(-time.Hour), InFlight: 3, LoadTime: time.Second},
		Resident{ID: "c-n1", Kind: "inference", Workload: "C", Node: "n1", Declared: Resources{HostBytes: 2 * gib}},
		Resident{ID: "d-n2", Kind: "inference", Workload: "D", Node: "n2", Declared: Resources{HostBytes: 8 * gib},
			OnDemand: true, ReadySince: t0.Add(-10 * time.Second), MinResidency: 30 * time.Second},
	)
	ev, err := Evict(r)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"evict for inference/want: waited 0s",
		"decision: EVICT 1 on n1 via cpu, cost 15s",
		"node 1. n1 via cpu: evict a-n1, cost 15s (exact); to free host 4294967296 accel 0 bytes, evictable instances free host 4294967296 accel 0",
		"node 2. n2 via cpu: busy; to free host 4294967296 accel 0 bytes, evictable instances free host 0 accel 0",
		"  evict a-n1 (inference/A) on n1: cost 15s (load 10s, idle 5m0s)",
		"  keep b-n1 (inference/B) on n1: in_flight: 3 in flight",
		"  keep c-n1 (inference/C) on n1: not_on_demand: its workload is not on demand",
		"  keep d-n2 (inference/D) on n2: min_residency: ready 10s ago, min_residency 30s",
	}
	if diff := cmp.Diff(want, ev.Lines()); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestEvictInvalid(t *testing.T) {
	r := evictReq([]string{"n1", "n1"}, idleRes("a", "A", "n1", 8*gib), idleRes("a", "A", "n1", 8*gib))
	r.Targets = append(r.Targets, EvictTarget{Node: "ghost"})
	r.Residents[0].InFlight = -1
	r.Policy.RecencyHalfLife = 0
	r.Nodes[0].Used = Resources{}
	_, err := Evict(r)
	if !errors.Is(err, ErrInvalidEviction) {
		t.Fatalf("err = %v, want ErrInvalidEviction", err)
	}
	for _, want := range []string{"half-life", "node \"n1\" given twice", "\"ghost\" has no capacity", "instance \"a\" given twice", "negative", "declare more than"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestEvictTargets(t *testing.T) {
	req := chatRequest()
	full := chatNode("full")
	full.Memory = Memory{HostFree: gib, VRAMFree: []uint64{gib}} // too little for 2 + 6 GiB
	roomy := chatNode("roomy")
	roomy.Memory = Memory{HostFree: 64 * gib, VRAMFree: []uint64{24 * gib}}
	dead := chatNode("dead")
	dead.Liveness = Dead
	nodes := []Node{roomy, dead, full}
	d, err := Place(req, nodes, Cluster{}, DefaultWeights())
	if err != nil || d.Chosen == nil || d.Chosen.Node != "roomy" {
		t.Fatalf("Place: %v, %+v", err, d.Chosen)
	}
	got, err := EvictTargets(req, nodes, Cluster{}, DefaultWeights())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tg := range got {
		ids = append(ids, tg.Node)
		if tg.Demand != (Resources{HostBytes: 2 * gib, AccelBytes: 6 * gib}) || tg.Variant != "cuda" {
			t.Errorf("target %+v: want the cuda route's demand", tg)
		}
	}
	// The full node is a target (memory aside); the dead one is not.
	if len(ids) != 2 || !strings.Contains(strings.Join(ids, ","), "full") || !strings.Contains(strings.Join(ids, ","), "roomy") {
		t.Errorf("targets %v, want full and roomy", ids)
	}
	req.Pin = "dead"
	if got, err := EvictTargets(req, nodes, Cluster{}, DefaultWeights()); err != nil || got != nil {
		t.Errorf("pinned to a dead node: %v, %v; want none", got, err)
	}
	req.Pin = "full"
	if got, err := EvictTargets(req, nodes, Cluster{}, DefaultWeights()); err != nil || len(got) != 1 || got[0].Node != "full" {
		t.Errorf("pinned to full: %v, %v; want it alone", got, err)
	}
	if req.Variants[0].Resources.AccelBytes != 6*gib {
		t.Error("EvictTargets modified its request")
	}
}

// BenchmarkEvict is the worst case of the exact search: three nodes, each
// with EvictExactMax evictable instances of distinct costs and a need
// that takes several of them.
func BenchmarkEvict(b *testing.B) {
	var residents []Resident
	for _, n := range []string{"n1", "n2", "n3"} {
		for i := range EvictExactMax {
			res := idleRes(fmt.Sprintf("%s-%02d", n, i), fmt.Sprintf("W%d", i), n, gib/2+uint64(i)*gib/8)
			res.LoadTime = time.Duration(i+1) * time.Second
			residents = append(residents, res)
		}
	}
	r := evictReq([]string{"n1", "n2", "n3"}, residents...)
	for i := range r.Nodes {
		r.Nodes[i].Capacity.HostBytes = r.Nodes[i].Used.HostBytes
	}
	b.ReportAllocs()
	for b.Loop() {
		if ev, err := Evict(r); err != nil || ev.Outcome != EvictChosen {
			b.Fatal(ev.Outcome, err)
		}
	}
}
