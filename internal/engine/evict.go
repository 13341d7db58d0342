package engine

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// Evict chooses what to unload so that a demanded workload fits when no
// node has room for it: the swap under memory pressure. It is pure like
// Place (the time is r.Now, given), never modifies its arguments, and
// explains itself (Eviction.Lines).
//
// Rules. An instance is never evicted when it is of the demanded workload
// itself (same_workload), of a workload not on demand (not_on_demand),
// not yet ready (starting), serving requests (in_flight), inside its
// min_residency since it became ready (min_residency), or when it had a
// request within Policy.Grace and the demand has waited less than
// Policy.Patience (recent_request: requests for a loaded model are served
// before a swap, up to the patience, so mixed traffic swaps less than
// first come first served).
//
// Fit. A node fits when, in each pool the workload's demand draws on, the
// declared resources accounted on it (EvictNode.Used) plus the demand are
// within its capacity, after the chosen instances' declared resources are
// taken off. So a node is never given more than its memory by declared
// resources, whatever its free memory says.
//
// Cost of evicting an instance (EvictCost), in seconds of loading: the
// operator's evict_cost when set (a whole number of seconds), else the
// instance's measured load time L (Policy.UnmeasuredLoad when it has none)
// weighted by recency:
//
//	cost = L × (1 + 2^(−idle / Policy.RecencyHalfLife))
//
// where idle is the time since its last request (or since it became
// ready, if it had none): an instance used just now costs 2L (it will
// likely be loaded again soon), one long idle costs L.
//
// Choice. On each target node, the set of evictable instances with the
// least total cost that makes the workload fit; ties go to fewer
// instances, then to the set whose instance ids, sorted, come first. The
// search is exact over every subset when a node has at most EvictExactMax
// evictable instances (and their sums cannot overflow); beyond, greedy
// (add the instance with the least cost per byte still needed, then drop
// any the fit does not need, the dearest first), which frees enough but
// may cost more than the least.
// Among the targets, the best tier wins (as in Place: an eviction never
// sends a workload to an emulated route while a native one can be made
// to fit), then the least cost (a node that fits without evicting costs
// nothing), then the engine's rank (the order of r.Targets, itself by
// score, then node id).
//
// Errors: ErrInvalidEviction, with every problem of the input joined.
// "Cannot fit even by evicting" is not an error: it is an Eviction with
// Outcome EvictCannot and a Reason.
func Evict(r EvictRequest) (Eviction, error) {
	if err := r.validate(); err != nil {
		return Eviction{}, err
	}
	nodes := make(map[string]*EvictNode, len(r.Nodes))
	for i := range r.Nodes {
		nodes[r.Nodes[i].ID] = &r.Nodes[i]
	}
	rank := make(map[string]int, len(r.Targets))
	for i, t := range r.Targets {
		rank[t.Node] = i
	}

	ev := Eviction{Kind: r.Kind, Name: r.Name, Waited: r.waited()}
	// Every resident of a target node gets its verdict, by node rank,
	// then id.
	byNode := make([][]int, len(r.Targets))
	for i := range r.Residents {
		if _, ok := rank[r.Residents[i].Node]; ok {
			ev.Residents = append(ev.Residents, r.verdict(&r.Residents[i]))
		}
	}
	slices.SortFunc(ev.Residents, func(a, b ResidentVerdict) int {
		if c := rank[a.Node] - rank[b.Node]; c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	for i := range ev.Residents {
		k := rank[ev.Residents[i].Node]
		byNode[k] = append(byNode[k], i)
	}

	best := -1
	for k, t := range r.Targets {
		nr := evictOnNode(t, nodes[t.Node], ev.Residents, byNode[k])
		nr.Rank = k + 1
		ev.Nodes = append(ev.Nodes, nr)
		if nr.Verdict != NodeFits && nr.Verdict != NodeEvict {
			continue
		}
		if best < 0 || betterNode(&ev.Nodes[k], &r.Targets[k], &ev.Nodes[best], &r.Targets[best]) {
			best = k
		}
	}
	if best < 0 {
		ev.Outcome, ev.Reason, ev.RetryAt = EvictCannot, cannotReason(ev.Nodes), retryAt(ev)
		return ev, nil
	}
	chosen := &ev.Nodes[best]
	ev.Node, ev.Variant, ev.Cost = chosen.Node, chosen.Variant, chosen.Cost
	if chosen.Verdict == NodeFits {
		ev.Outcome = EvictNotNeeded
		return ev, nil
	}
	ev.Outcome = EvictChosen
	ev.Evict = slices.Clone(chosen.Set)
	for _, id := range ev.Evict {
		for i := range ev.Residents {
			if ev.Residents[i].ID == id {
				ev.Residents[i].Evicted = true
			}
		}
	}
	return ev, nil
}

// betterNode reports whether node a (target ta) is a better choice than
// node b: a better tier, then a lower cost, then a better rank.
func betterNode(a *EvictNodeResult, ta *EvictTarget, b *EvictNodeResult, tb *EvictTarget) bool {
	if ta.Tier != tb.Tier {
		return ta.Tier < tb.Tier
	}
	if a.Cost != b.Cost {
		return a.Cost < b.Cost
	}
	return a.Rank < b.Rank
}

// EvictExactMax is the most evictable instances on one node for which
// Evict tries every subset (2^12 = 4,096 sets); beyond it the choice is
// greedy.
const EvictExactMax = 12

// EvictRequest is what Evict decides from: the demanded workload, where
// it may go, what each of those nodes holds by declared resources, and
// the instances there.
type EvictRequest struct {
	// Kind and Name name the demanded workload, as in Request. A resident
	// of the same Kind and Name is never evicted for it.
	Kind string
	Name string
	// Now is the time of the decision; DemandSince is when the oldest
	// request still waiting for the workload arrived (zero: now). How long
	// it waited bounds the grace given to recently used instances.
	Now         time.Time
	DemandSince time.Time
	// Targets are the nodes where the workload could go but for memory,
	// best first: the engine's rank (EvictTargets builds them).
	Targets []EvictTarget
	// Nodes are the capacity and declared use of every target node (others
	// are ignored).
	Nodes []EvictNode
	// Residents are the instances on the nodes, evictable or not; those on
	// nodes not among the targets are ignored.
	Residents []Resident
	// Policy holds the grace, patience and cost weights
	// (DefaultEvictPolicy).
	Policy EvictPolicy
}

// EvictTarget is one node where the workload may go and what it takes
// there.
type EvictTarget struct {
	Node    string
	Variant string
	// Tier is the route's tier on the node (Candidate.Tier).
	Tier Tier
	// Demand is the declared resources of the route (Variant.Resources).
	Demand Resources
}

// EvictNode is a node's memory by declared resources: what it has and
// what the controller has accounted on it.
type EvictNode struct {
	ID string
	// Unified nodes have one pool, Capacity.HostBytes, from which host and
	// accelerator demand are both taken (as in Memory); Capacity.AccelBytes
	// is ignored.
	Unified bool
	// Capacity is the memory the node has for workloads.
	Capacity Resources
	// Used is the declared resources of everything accounted on the node:
	// every instance (the residents given among them) and every pending
	// placement.
	Used Resources
}

// Resident is one running (or starting) instance that might be evicted.
type Resident struct {
	// ID is the instance id, unique among the residents.
	ID       string
	Kind     string
	Workload string
	Node     string
	// Declared is the instance's declared resources, freed by evicting
	// it.
	Declared Resources
	// OnDemand is set for an instance of an on-demand workload: no other
	// is ever evicted.
	OnDemand bool
	// ReadySince is when it became ready; zero while it starts.
	ReadySince time.Time
	// LastRequest is when it last served a request (zero: none since it
	// became ready); InFlight is how many it serves now.
	LastRequest time.Time
	InFlight    int
	// MinResidency is the workload's min_residency.
	MinResidency time.Duration
	// EvictCost is the operator's evict_cost in seconds; 0 is unset.
	EvictCost int
	// LoadTime is the measured start-to-ready time; 0 is unmeasured.
	LoadTime time.Duration
}

// EvictPolicy are the weights of Evict.
type EvictPolicy struct {
	// Grace keeps an instance that had a request within it: a model in
	// use serves its next requests before a swap. 0 evicts as soon as
	// nothing is in flight (first come, first served).
	Grace time.Duration
	// Patience bounds the grace: once the demand has waited this long, a
	// recent request no longer keeps an instance (requests in flight still
	// do). It keeps a busy model from starving the others.
	Patience time.Duration
	// RecencyHalfLife is the idle time after which an instance's recency
	// weight halves. It must be positive.
	RecencyHalfLife time.Duration
	// UnmeasuredLoad is the load time assumed for an instance that has no
	// measured one. It must be positive.
	UnmeasuredLoad time.Duration
}

// Defaults of EvictPolicy.
const (
	DefaultEvictGrace      = 2 * time.Second
	DefaultEvictPatience   = 30 * time.Second
	DefaultRecencyHalfLife = 5 * time.Minute
	DefaultUnmeasuredLoad  = 30 * time.Second
)

// DefaultEvictPolicy returns the default weights: a 2 s grace, a 30 s
// patience (well inside on_demand.max_wait's 2 m default, leaving room for
// a load), a 5 minute recency half-life (idle_after's default) and 30 s
// for an unmeasured load.
func DefaultEvictPolicy() EvictPolicy {
	return EvictPolicy{Grace: DefaultEvictGrace, Patience: DefaultEvictPatience,
		RecencyHalfLife: DefaultRecencyHalfLife, UnmeasuredLoad: DefaultUnmeasuredLoad}
}

// EvictOutcome is what Evict decided.
type EvictOutcome uint8

// Outcomes. The zero value is invalid.
const (
	// EvictNotNeeded: the workload fits on Node by declared resources
	// without evicting anything.
	EvictNotNeeded EvictOutcome = iota + 1
	// EvictChosen: unload Evict on Node, then the workload fits there.
	EvictChosen
	// EvictCannot: no target can be made to fit now; Reason says why.
	EvictCannot
)

// String returns "not_needed", "evict" or "cannot".
func (o EvictOutcome) String() string {
	switch o {
	case EvictNotNeeded:
		return "not_needed"
	case EvictChosen:
		return "evict"
	case EvictCannot:
		return "cannot"
	default:
		return "invalid"
	}
}

// KeepCode says why an instance may not be evicted. Codes are stable:
// they enter the audit chain.
type KeepCode string

// Why an instance is kept, in the order they are checked (the first that
// holds is given).
const (
	KeepSameWorkload  KeepCode = "same_workload"
	KeepNotOnDemand   KeepCode = "not_on_demand"
	KeepStarting      KeepCode = "starting"
	KeepInFlight      KeepCode = "in_flight"
	KeepMinResidency  KeepCode = "min_residency"
	KeepRecentRequest KeepCode = "recent_request"
)

// Transient reports whether the keep lapses by itself (starting,
// in_flight, min_residency, recent_request), as against same_workload and
// not_on_demand, which never do.
func (k KeepCode) Transient() bool {
	switch k {
	case KeepStarting, KeepInFlight, KeepMinResidency, KeepRecentRequest:
		return true
	}
	return false
}

// CannotReason says why no target can be made to fit. Reasons are
// stable.
type CannotReason string

// Reasons of EvictCannot, from the most hopeful.
const (
	// CannotBusy: some target would fit if instances kept for a while
	// (starting, in flight, inside min_residency or their grace) were
	// evicted: ask again at RetryAt, or when their activity changes.
	CannotBusy CannotReason = "busy"
	// CannotNotEvictable: evicting every instance that may ever be evicted
	// frees too little on every target.
	CannotNotEvictable CannotReason = "not_evictable"
	// CannotTooLarge: the demand exceeds every target's capacity, empty.
	CannotTooLarge CannotReason = "too_large"
	// CannotNoTargets: no node passes the workload's other constraints.
	CannotNoTargets CannotReason = "no_targets"
)

// NodeVerdict is what a target node can do for the workload.
type NodeVerdict string

// Node verdicts.
const (
	// NodeFits: it fits without evicting.
	NodeFits NodeVerdict = "fits"
	// NodeEvict: it fits once Set is evicted.
	NodeEvict NodeVerdict = "evict"
	// NodeBusy: it would fit were the transiently kept instances
	// evictable.
	NodeBusy NodeVerdict = "busy"
	// NodeNotEvictable: even evicting every instance not permanently kept
	// frees too little.
	NodeNotEvictable NodeVerdict = "not_evictable"
	// NodeTooLarge: the demand exceeds the node's capacity, empty.
	NodeTooLarge NodeVerdict = "too_large"
)

// Eviction is Evict's answer.
type Eviction struct {
	Kind, Name string
	// Waited is how long the demand had waited (Now − DemandSince).
	Waited  time.Duration
	Outcome EvictOutcome
	// Node and Variant are where the workload goes (not EvictCannot).
	Node, Variant string
	// Evict are the ids of the instances to unload on Node, in the order
	// of Residents (EvictChosen only); Cost is their total.
	Evict []string
	Cost  time.Duration
	// Reason says why nothing can be done (EvictCannot only); RetryAt, when
	// not zero, is the earliest time a keep on a busy target lapses by
	// itself (a keep for a request in flight or a start lapses with
	// activity, which the caller sees).
	Reason  CannotReason
	RetryAt time.Time
	// Nodes holds one result per target, in target order.
	Nodes []EvictNodeResult
	// Residents holds one verdict per instance on a target node, by the
	// node's rank, then instance id.
	Residents []ResidentVerdict
}

// EvictNodeResult is one target node's outcome.
type EvictNodeResult struct {
	Node    string
	Variant string
	// Rank is the node's place among the targets, from 1.
	Rank    int
	Verdict NodeVerdict
	// Need is what must be freed, per pool (on a unified node, all in
	// HostBytes); Freeable is what every evictable instance together
	// frees.
	Need     Resources
	Freeable Resources
	// Set is the cheapest set for NodeEvict, sorted like Residents; Cost is
	// its total; Exact says the set was found by trying every subset.
	Set   []string
	Cost  time.Duration
	Exact bool
}

// ResidentVerdict is one instance's outcome.
type ResidentVerdict struct {
	ID, Kind, Workload, Node string
	Declared                 Resources
	// Keep is why it may not be evicted; empty when it may be, and then
	// Cost is what evicting it costs.
	Keep KeepCode
	Cost time.Duration
	// Until is when a min_residency or recent_request keep lapses.
	Until time.Time
	// Evicted is set for the instances chosen.
	Evicted bool

	// For the explanation: in flight, idle time and the cost's inputs.
	inFlight  int
	idle      time.Duration
	load      time.Duration
	evictCost int
	since     time.Duration // since ready
	minRes    time.Duration
}

// ErrInvalidEviction wraps every problem of an EvictRequest, joined.
var ErrInvalidEviction = errors.New("invalid eviction request")

func (r *EvictRequest) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Policy.RecencyHalfLife <= 0 {
		add("policy: recency half-life %v is not positive", r.Policy.RecencyHalfLife)
	}
	if r.Policy.UnmeasuredLoad <= 0 {
		add("policy: unmeasured load %v is not positive", r.Policy.UnmeasuredLoad)
	}
	if r.Policy.Grace < 0 || r.Policy.Patience < 0 {
		add("policy: grace %v or patience %v is negative", r.Policy.Grace, r.Policy.Patience)
	}
	nodes := map[string]*EvictNode{}
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if !validText(n.ID) {
			add("nodes[%d]: bad node id %q", i, clip(n.ID))
		} else if nodes[n.ID] != nil {
			add("nodes[%d]: node %q given twice", i, n.ID)
		}
		nodes[n.ID] = n
	}
	targets := map[string]bool{}
	for i, t := range r.Targets {
		switch {
		case targets[t.Node]:
			add("targets[%d]: node %q given twice", i, clip(t.Node))
		case nodes[t.Node] == nil:
			add("targets[%d]: node %q has no capacity given", i, clip(t.Node))
		}
		targets[t.Node] = true
	}
	ids := map[string]bool{}
	sums := map[string][2]uint64{}
	for i, res := range r.Residents {
		switch {
		case res.ID == "":
			add("residents[%d]: no instance id", i)
		case ids[res.ID]:
			add("residents[%d]: instance %q given twice", i, clip(res.ID))
		}
		ids[res.ID] = true
		if res.InFlight < 0 || res.MinResidency < 0 || res.EvictCost < 0 || res.LoadTime < 0 {
			add("residents[%d] %q: a negative in-flight count, min_residency, evict_cost or load time", i, clip(res.ID))
		}
		if n := nodes[res.Node]; n != nil {
			s := sums[res.Node]
			sums[res.Node] = [2]uint64{satAdd(s[0], res.Declared.HostBytes), satAdd(s[1], res.Declared.AccelBytes)}
		}
	}
	for _, n := range r.Nodes {
		s := sums[n.ID]
		if !targets[n.ID] {
			continue
		}
		if n.Unified {
			if satAdd(s[0], s[1]) > satAdd(n.Used.HostBytes, n.Used.AccelBytes) {
				add("node %q: its residents declare more than its used memory", n.ID)
			}
		} else if s[0] > n.Used.HostBytes || s[1] > n.Used.AccelBytes {
			add("node %q: its residents declare more than its used memory", n.ID)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidEviction, errors.Join(errs...))
	}
	return nil
}

func (r *EvictRequest) waited() time.Duration {
	if r.DemandSince.IsZero() || r.DemandSince.After(r.Now) {
		return 0
	}
	return r.Now.Sub(r.DemandSince)
}

// verdict decides whether res may be evicted now, and at what cost.
func (r *EvictRequest) verdict(res *Resident) ResidentVerdict {
	v := ResidentVerdict{ID: res.ID, Kind: res.Kind, Workload: res.Workload, Node: res.Node, Declared: res.Declared,
		inFlight: res.InFlight, load: res.LoadTime, evictCost: res.EvictCost, minRes: res.MinResidency}
	p := r.Policy
	last := res.LastRequest
	if last.Before(res.ReadySince) {
		last = res.ReadySince
	}
	if !res.ReadySince.IsZero() && r.Now.After(res.ReadySince) {
		v.since = r.Now.Sub(res.ReadySince)
	}
	if !last.IsZero() && r.Now.After(last) {
		v.idle = r.Now.Sub(last)
	}
	switch {
	case res.Kind == r.Kind && res.Workload == r.Name:
		v.Keep = KeepSameWorkload
	case !res.OnDemand:
		v.Keep = KeepNotOnDemand
	case res.ReadySince.IsZero():
		v.Keep = KeepStarting
	case res.InFlight > 0:
		v.Keep = KeepInFlight
	case r.Now.Before(res.ReadySince.Add(res.MinResidency)):
		v.Keep, v.Until = KeepMinResidency, res.ReadySince.Add(res.MinResidency)
	case !res.LastRequest.IsZero() && r.Now.Before(res.LastRequest.Add(p.Grace)) && r.waited() < p.Patience:
		v.Keep, v.Until = KeepRecentRequest, res.LastRequest.Add(p.Grace)
		if r.DemandSince.IsZero() {
			break
		}
		if end := r.DemandSince.Add(p.Patience); end.Before(v.Until) {
			v.Until = end
		}
	}
	v.Cost = EvictCost(res, r.Now, p)
	return v
}

// EvictCost is what evicting res at now costs (see Evict): its
// evict_cost in seconds when set, else its load time weighted by recency.
func EvictCost(res *Resident, now time.Time, p EvictPolicy) time.Duration {
	if res.EvictCost > 0 {
		return time.Duration(res.EvictCost) * time.Second
	}
	load := res.LoadTime
	if load <= 0 {
		load = p.UnmeasuredLoad
	}
	last := res.LastRequest
	if last.Before(res.ReadySince) {
		last = res.ReadySince
	}
	var idle time.Duration
	if !last.IsZero() && now.After(last) {
		idle = now.Sub(last)
	}
	hl := p.RecencyHalfLife
	if hl <= 0 {
		hl = DefaultRecencyHalfLife
	}
	w := math.Exp2(-float64(idle) / float64(hl))
	extra := time.Duration(float64(load) * w)
	return satDur(load, extra)
}

func satDur(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// pools are a node's figures per pool: [0] host (or the one unified
// pool), [1] accelerator.
type pools [2]uint64

func poolsOf(r Resources, unified bool) pools {
	if unified {
		return pools{satAdd(r.HostBytes, r.AccelBytes), 0}
	}
	return pools{r.HostBytes, r.AccelBytes}
}

func (p pools) resources() Resources { return Resources{HostBytes: p[0], AccelBytes: p[1]} }

// covers reports whether freed meets need in every pool.
func (p pools) covers(need pools) bool { return p[0] >= need[0] && p[1] >= need[1] }

func (p pools) plus(q pools) pools { return pools{satAdd(p[0], q[0]), satAdd(p[1], q[1])} }

// evictOnNode finds what target t needs on node n, and the cheapest set
// of the residents at idx (indices into all) that frees it.
func evictOnNode(t EvictTarget, n *EvictNode, all []ResidentVerdict, idx []int) EvictNodeResult {
	nr := EvictNodeResult{Node: t.Node, Variant: t.Variant}
	demand := poolsOf(t.Demand, n.Unified)
	capacity := pools{n.Capacity.HostBytes, n.Capacity.AccelBytes}
	if n.Unified {
		capacity[1] = 0
	}
	used := poolsOf(n.Used, n.Unified)
	var need pools
	for p := range need {
		if demand[p] == 0 {
			continue // no demand on a pool always fits, as in Place
		}
		if demand[p] > capacity[p] {
			nr.Verdict = NodeTooLarge
			nr.Need = pools{}.resources()
			return nr
		}
		if s := satAdd(used[p], demand[p]); s > capacity[p] {
			need[p] = s - capacity[p]
		}
	}
	nr.Need = need.resources()
	if need == (pools{}) {
		nr.Verdict = NodeFits
		return nr
	}
	var cands []int
	var freeable, transient pools
	for _, i := range idx {
		v := &all[i]
		d := poolsOf(v.Declared, n.Unified)
		switch {
		case v.Keep == "":
			cands = append(cands, i)
			freeable = freeable.plus(d)
			transient = transient.plus(d)
		case v.Keep.Transient():
			transient = transient.plus(d)
		}
	}
	nr.Freeable = freeable.resources()
	if !freeable.covers(need) {
		if transient.covers(need) {
			nr.Verdict = NodeBusy
		} else {
			nr.Verdict = NodeNotEvictable
		}
		return nr
	}
	// The candidates by cost, then id: the greedy's order, and the order
	// of an exact search's bits.
	slices.SortFunc(cands, func(a, b int) int {
		if all[a].Cost != all[b].Cost {
			if all[a].Cost < all[b].Cost {
				return -1
			}
			return 1
		}
		return strings.Compare(all[a].ID, all[b].ID)
	})
	var set []int
	if len(cands) <= EvictExactMax {
		set, nr.Exact = exactSet(cands, all, need, n.Unified)
	}
	if !nr.Exact {
		set = greedySet(cands, all, need, n.Unified)
	}
	slices.Sort(set) // the order of Residents: node rank, then id
	nr.Verdict = NodeEvict
	for _, i := range set {
		nr.Set = append(nr.Set, all[i].ID)
		nr.Cost = satDur(nr.Cost, all[i].Cost)
	}
	return nr
}

// exactSet tries every subset of cands and returns the one that covers
// need at the least cost, then with the fewest instances, then whose ids
// sorted come first. It walks the subsets in Gray code order, each one
// instance in or out from the last, so a subset costs a few additions;
// ok is false when the sums could overflow (the caller goes greedy).
func exactSet(cands []int, all []ResidentVerdict, need pools, unified bool) (set []int, ok bool) {
	k := len(cands)
	var frees [EvictExactMax]pools
	var costs [EvictExactMax]time.Duration
	var total pools
	var totalCost time.Duration
	for b, i := range cands {
		frees[b], costs[b] = poolsOf(all[i].Declared, unified), all[i].Cost
		total, totalCost = total.plus(frees[b]), satDur(totalCost, costs[b])
	}
	if total[0] == math.MaxUint64 || total[1] == math.MaxUint64 || totalCost == math.MaxInt64 {
		return nil, false
	}
	var (
		mask, bestMask uint32
		freed          pools
		cost, bestCost time.Duration
		n, bestN       int
	)
	for g := uint32(1); g < 1<<k; g++ {
		b := bits.TrailingZeros32(g)
		mask ^= 1 << b
		if mask&(1<<b) != 0 {
			freed[0], freed[1], cost, n = freed[0]+frees[b][0], freed[1]+frees[b][1], cost+costs[b], n+1
		} else {
			freed[0], freed[1], cost, n = freed[0]-frees[b][0], freed[1]-frees[b][1], cost-costs[b], n-1
		}
		if !freed.covers(need) {
			continue
		}
		if bestMask == 0 || cost < bestCost || cost == bestCost && (n < bestN ||
			n == bestN && idsBefore(maskIDs(mask, cands, all), maskIDs(bestMask, cands, all))) {
			bestMask, bestCost, bestN = mask, cost, n
		}
	}
	for b := 0; b < k; b++ {
		if bestMask&(1<<b) != 0 {
			set = append(set, cands[b])
		}
	}
	return set, true
}

func maskIDs(mask uint32, cands []int, all []ResidentVerdict) []string {
	var ids []string
	for b := range cands {
		if mask&(1<<b) != 0 {
			ids = append(ids, all[cands[b]].ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// idsBefore reports whether the sorted ids a come before b.
func idsBefore(a, b []string) bool { return slices.Compare(a, b) < 0 }

// greedySet adds, while need is not covered, the candidate with the least
// cost per byte of need it still covers (ties by cost order), then drops
// every chosen one, dearest first, that the cover does not need.
func greedySet(cands []int, all []ResidentVerdict, need pools, unified bool) []int {
	chosen := make([]bool, len(cands))
	var freed pools
	for !freed.covers(need) {
		best, bestRatio := -1, 0.0
		for j, i := range cands {
			if chosen[j] {
				continue
			}
			d := poolsOf(all[i].Declared, unified)
			var useful float64
			for p := range d {
				if freed[p] < need[p] {
					useful += float64(min(d[p], need[p]-freed[p]))
				}
			}
			if useful == 0 {
				continue
			}
			ratio := float64(all[i].Cost) / useful
			if best < 0 || ratio < bestRatio {
				best, bestRatio = j, ratio
			}
		}
		if best < 0 {
			break // cannot happen: the candidates together cover need
		}
		chosen[best] = true
		freed = freed.plus(poolsOf(all[cands[best]].Declared, unified))
	}
	for j := len(cands) - 1; j >= 0; j-- { // dearest first
		if !chosen[j] {
			continue
		}
		d := poolsOf(all[cands[j]].Declared, unified)
		if (pools{freed[0] - d[0], freed[1] - d[1]}).covers(need) {
			chosen[j] = false
			freed = pools{freed[0] - d[0], freed[1] - d[1]}
		}
	}
	var set []int
	for j, c := range chosen {
		if c {
			set = append(set, cands[j])
		}
	}
	return set
}

// cannotReason is the most hopeful verdict among the targets.
func cannotReason(nodes []EvictNodeResult) CannotReason {
	if len(nodes) == 0 {
		return CannotNoTargets
	}
	reason := CannotTooLarge
	for _, n := range nodes {
		switch n.Verdict {
		case NodeBusy:
			return CannotBusy
		case NodeNotEvictable:
			reason = CannotNotEvictable
		}
	}
	return reason
}

// retryAt is the earliest time a dated keep on a busy target lapses.
func retryAt(ev Eviction) time.Time {
	busy := map[string]bool{}
	for _, n := range ev.Nodes {
		if n.Verdict == NodeBusy {
			busy[n.Node] = true
		}
	}
	var at time.Time
	for _, v := range ev.Residents {
		if busy[v.Node] && !v.Until.IsZero() && (at.IsZero() || v.Until.Before(at)) {
			at = v.Until
		}
	}
	return at
}

// EvictTargets ranks the nodes where req could go were memory no object,
// for Evict: it places req with every variant's memory demand set aside
// (so a node is rejected only by the other constraints) and returns its
// eligible candidates, best first, each with the route it would take and
// that route's declared resources. With a pin, only the pinned node, or
// none when it is not eligible. Its errors are Place's.
//
// The route on each node is the first that fits but for memory: a later
// variant that would have fit the node's free memory is not considered,
// as the eviction makes room for the preferred route.
func EvictTargets(req Request, nodes []Node, cluster Cluster, w Weights) ([]EvictTarget, error) {
	free := req
	free.Variants = slices.Clone(req.Variants)
	for i := range free.Variants {
		free.Variants[i].Resources = Resources{}
	}
	d, err := Place(free, nodes, cluster, w)
	if errors.Is(err, ErrPinIneligible) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []EvictTarget
	for _, c := range d.Candidates {
		if !c.Eligible() || req.Pin != "" && c.Node != req.Pin {
			continue
		}
		vi := slices.IndexFunc(req.Variants, func(v Variant) bool { return v.Name == c.Variant })
		out = append(out, EvictTarget{Node: c.Node, Variant: c.Variant, Tier: c.Tier, Demand: req.Variants[vi].Resources})
	}
	return out, nil
}
