package plane

// On-demand declared workloads (Workload.OnDemand): no instance until a
// node demands the workload's role (Demand), up to its replicas, one more
// per demand of a workload with none wanted; unloaded again by the tick
// when idle (idleUnload). The demanded count is persisted with the
// declaration (declState.Demanded), so a restarted controller places no
// second copy of a workload cold, starting or idle: what is placed is in
// its placements, what is wanted in its declaration.
//
// States (Standby, DeclarationView.OnDemand):
//
//   - cold: no instance wanted nor held (an instance being unloaded
//     counts as gone).
//   - starting: wanted, and not yet running on its node: being placed,
//     placed but loading, or a demand the next tick places.
//   - ready: running, with a request in flight or one answered within
//     the last Config.Tick (or the instance became ready within it).
//   - idle: running, no request in flight, and none answered within the
//     last Config.Tick; it is unloaded once the last request (or its
//     becoming ready, when it served none) is IdleAfter old and it has
//     been ready for MinResidency.
//
// The activity is the host's (ctl.InstanceActivity in its signed
// listing, as this tick's describe brought it); an instance whose host
// reports no activity is never unloaded for idleness. When the
// instance became ready is the controller's first tick that saw it
// running; a restarted controller starts counting again (an instance
// stays longer, never shorter).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/pkg"
	"go.uber.org/zap"
)

// OnDemand is a declared workload's on-demand settings
// (controller.workloads[].on_demand with enabled true).
type OnDemand struct {
	// IdleAfter unloads an instance that served no request this long.
	IdleAfter time.Duration
	// MinResidency is how long an instance stays after it became ready
	// before it may be idled or evicted.
	MinResidency time.Duration
	// MaxWait is how long a request may wait for an instance (the
	// consumer's hold; advertised in Standby).
	MaxWait time.Duration
	// DemandFrom are the node ids, besides the controller's own node,
	// that may demand the workload (default deny).
	DemandFrom []string
	// EvictCost is the operator's cost of evicting an idle instance
	// (higher is kept longer); 0 weighs measured load time and recency.
	EvictCost int
}

// On-demand states.
const (
	OnDemandCold     = "cold"
	OnDemandStarting = "starting"
	OnDemandReady    = "ready"
	OnDemandIdle     = "idle"
)

// Standby is an on-demand workload as the nodes allowed to demand it
// learn of it (the standby advert): its role, the model it serves, how
// long a request may wait for it, who may demand it, and its state.
type Standby struct {
	Role     string
	Workload string
	Model    string
	MaxWait  time.Duration
	// DemandFrom are the node ids allowed to demand it besides the
	// controller's own node.
	DemandFrom []string
	State      string
}

// DemandCode says why a demand was refused.
type DemandCode string

// Demand refusal codes.
const (
	// DemandUnknownRole: no on-demand workload of this controller serves
	// the role (or its package cannot be read to know it).
	DemandUnknownRole DemandCode = "unknown_role"
	// DemandNotAllowed: the node is not in the workload's demand_from.
	DemandNotAllowed DemandCode = "demand_not_allowed"
)

// DemandError is Demand's refusal: nothing was changed.
type DemandError struct {
	Code DemandCode
	Role string
	Node string
	// Workload is the workload that serves Role ("" for unknown_role).
	Workload string
}

func (e *DemandError) Error() string {
	switch e.Code {
	case DemandNotAllowed:
		return fmt.Sprintf("demand of role %s (workload %s) refused: node %s is not in its on_demand.demand_from", e.Role, e.Workload, e.Node)
	default:
		return fmt.Sprintf("demand of role %s refused: no on-demand workload serves it", e.Role)
	}
}

// roleInfo is what the controller knows of a workload's package: the role
// it serves and its model, from the manifest of the version resolved.
type roleInfo struct {
	pkg, version string
	role, model  string
}

// validate reports the problems of workload i's on-demand settings.
func (od *OnDemand) validate(i int) []error {
	if od == nil {
		return nil
	}
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("workloads[%d].on_demand.%s: must be positive, got %s", i, name, d))
		}
	}
	pos("idle_after", od.IdleAfter)
	pos("min_residency", od.MinResidency)
	pos("max_wait", od.MaxWait)
	if od.MinResidency > od.IdleAfter && od.IdleAfter > 0 {
		errs = append(errs, fmt.Errorf("workloads[%d].on_demand.min_residency: %s is longer than idle_after (%s)", i, od.MinResidency, od.IdleAfter))
	}
	if od.EvictCost < 0 {
		errs = append(errs, fmt.Errorf("workloads[%d].on_demand.evict_cost: must not be negative, got %d", i, od.EvictCost))
	}
	for _, n := range od.DemandFrom {
		if n == "" || len(n) > engine.MaxTextLen || !grammar.PrintableASCII(n) {
			errs = append(errs, fmt.Errorf("workloads[%d].on_demand.demand_from: %q is not a node id", i, n))
		}
	}
	return errs
}

// wantedLocked is how many instances w keeps now: its replicas, or for
// an on-demand workload the demanded count (at most its replicas). The
// caller holds mu.
func wantedLocked(w Workload, st *declState) int {
	if w.OnDemand == nil {
		return w.replicas()
	}
	if st == nil {
		return 0
	}
	return min(st.Demanded, w.replicas())
}

// lapsedLocked says whether the demand of on-demand workload w lapsed: no
// instance met it within its max_wait (nothing held nor being placed), so
// the requests that demanded it have given up and it is not started long
// after, when room comes; a later demand asks again. The caller holds mu.
func (c *reconciler) lapsedLocked(w Workload, st *declState, now time.Time) bool {
	return w.OnDemand != nil && st != nil && st.Demanded > 0 && !st.DemandedAt.IsZero() &&
		now.Sub(st.DemandedAt) > w.OnDemand.MaxWait && c.heldLocked(w.Name) == 0
}

// lowerDemandLocked takes one instance off the demand of declared
// workload name (an idle unload, an eviction, a lapse: all when true);
// the workload is cold once none is left. The caller holds mu and
// persists.
func (c *writer) lowerDemandLocked(name string, all bool) {
	st := c.decls[name]
	switch {
	case st == nil:
	case all || st.Demanded <= 1:
		st.Demanded, st.DemandedAt = 0, time.Time{}
	default:
		st.Demanded--
	}
}

// wakeTick makes Run tick now rather than at its next period.
func (c *core) wakeTick() {
	select {
	case c.tickNow <- struct{}{}:
	default:
	}
}

// Demand asks for an instance of the on-demand workload serving role,
// for node from (the controller's own node always may; another only
// when the workload's demand_from lists it). A workload cold gets one
// instance wanted, persisted, and the tick comes at once to place it by
// the engine, chained as every declared placement is; a workload
// starting, ready or idle is left as it is (demands are idempotent).
// It returns the workload's state after the demand. A refusal is a
// *DemandError and changes nothing.
func (c *Controller) Demand(ctx context.Context, role, fromNodeID string) (string, error) {
	if err := c.notLeader(); err != nil {
		return "", err
	}
	w, ok := c.workloadOfRole(role)
	if !ok {
		// The roles are learnt on the ticks; a demand before the first
		// one (or after a reload) reads the store.
		c.life.learnRoles(ctx)
		if w, ok = c.workloadOfRole(role); !ok {
			c.met.demands.WithLabelValues(string(DemandUnknownRole)).Inc()
			return "", &DemandError{Code: DemandUnknownRole, Role: role, Node: fromNodeID}
		}
	}
	if !demandAllowed(w, fromNodeID, c.selfID()) {
		c.met.demands.WithLabelValues(string(DemandNotAllowed)).Inc()
		return "", &DemandError{Code: DemandNotAllowed, Role: role, Node: fromNodeID, Workload: w.Name}
	}
	now := c.now()
	c.mu.Lock()
	st := c.decls[w.Name]
	if st == nil {
		st = &declState{Name: w.Name}
		c.decls[w.Name] = st
	}
	if st.Demanded > 0 || c.heldLocked(w.Name) > 0 {
		state := c.read.onDemandStateLocked(w, now)
		c.mu.Unlock()
		c.met.demands.WithLabelValues("held").Inc()
		return state, nil
	}
	// A demand ends the backoff of earlier failures: its requests wait
	// at most max_wait.
	was := *st
	st.Demanded, st.DemandedAt = 1, now
	st.NextAttempt = time.Time{}
	c.mu.Unlock()
	if err := c.w.persist(); err != nil {
		c.mu.Lock()
		st.Demanded, st.DemandedAt, st.NextAttempt = was.Demanded, was.DemandedAt, was.NextAttempt
		c.mu.Unlock()
		return "", fmt.Errorf("demand of %s: %w", w.Name, err)
	}
	c.met.demands.WithLabelValues("accepted").Inc()
	c.wakeTick()
	return OnDemandStarting, nil
}

// heldLocked counts the placements of declared workload name that hold
// or are being given an instance (not one being unloaded). The caller
// holds mu.
func (c *core) heldLocked(name string) int {
	n := 0
	for _, p := range c.placements {
		if p.Declared != name {
			continue
		}
		switch p.Life {
		case LifeDispatching, LifeUnsettled, LifePlaced, LifeLost:
			n++
		}
	}
	return n
}

// demandAllowed says whether node may demand w (self is this node)
func demandAllowed(w Workload, node, self string) bool {
	if node == "" {
		return false
	}
	if node == self {
		return true
	}
	return slices.Contains(w.OnDemand.DemandFrom, node)
}

// selfID is this node's id: the Self target's, else the one
// NewFromConfig was given; "" when neither.
func (c *Controller) selfID() string {
	if c.fromConfig != nil {
		return c.fromConfig.src.Self.ID()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, n := range c.nodes {
		if n.target.Self {
			return id
		}
	}
	return ""
}

// workloadOfRole is the on-demand workload whose package serves role, as
// last learnt.
func (c *core) workloadOfRole(role string) (Workload, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.conf().Workloads {
		if w.OnDemand == nil {
			continue
		}
		if ri, ok := c.roles[w.Name]; ok && ri.role == role && ri.pkg == w.Package {
			return w, true
		}
	}
	return Workload{}, false
}

// LearnRoles reads the role and model of every on-demand workload from
// the store now, as each tick does. The daemon calls it before the mesh
// starts: Standby lists only the workloads whose role is known, so a
// controller that waited for its first tick would advertise no standby
// until then, and a restarted one would withdraw its standbys from the
// consumers (whose requests would get 503 no_instance instead of being
// held) for up to a tick.
func (c *Controller) LearnRoles(ctx context.Context) { c.life.learnRoles(ctx) }

// learnRoles reads, for every on-demand workload, the role and model of
// the package version it resolves to in the store (verified), keeping
// what it knew when the store cannot be read.
func (c *lifecycle) learnRoles(ctx context.Context) {
	for _, w := range c.conf().Workloads {
		if w.OnDemand == nil || c.store == nil {
			continue
		}
		dir, version, err := c.store.Resolve(w.Package, w.Version)
		if err != nil {
			continue
		}
		c.mu.Lock()
		ri, known := c.roles[w.Name]
		c.mu.Unlock()
		if known && ri.pkg == w.Package && ri.version == version {
			continue
		}
		p, err := c.disp.VerifyPackage(ctx, dir)
		if err != nil {
			continue
		}
		m := p.Verified().Manifest
		if m.Kind != pkg.KindInference || m.Role == "" {
			continue
		}
		model := m.Runtime.Model
		if model == "" {
			model = m.Role
		}
		c.mu.Lock()
		c.roles[w.Name] = roleInfo{pkg: w.Package, version: version, role: m.Role, model: model}
		c.mu.Unlock()
	}
}

// Standby lists the on-demand workloads whose role is known, by role: what
// a standby advert tells the nodes allowed to demand them.
func (c *Controller) Standby() []Standby {
	if !c.leads() {
		// Only the leader answers demands.
		return nil
	}
	now := c.now()
	ws := c.conf().Workloads
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Standby
	for _, w := range ws {
		ri, ok := c.roles[w.Name]
		if w.OnDemand == nil || !ok || ri.pkg != w.Package {
			continue
		}
		out = append(out, Standby{Role: ri.role, Workload: w.Name, Model: ri.model, MaxWait: w.OnDemand.MaxWait,
			DemandFrom: slices.Clone(w.OnDemand.DemandFrom), State: c.read.onDemandStateLocked(w, now)})
	}
	slices.SortFunc(out, func(a, b Standby) int { return strings.Compare(a.Role, b.Role) })
	return out
}

// onDemandStateLocked is w's on-demand state at now (see the file
// comment). The caller holds mu.
func (c *readModel) onDemandStateLocked(w Workload, now time.Time) string {
	// The state of the most useful instance: ready, then starting, then
	// idle; with none, starting when one is wanted.
	state := OnDemandCold
	rank := map[string]int{OnDemandCold: 0, OnDemandIdle: 1, OnDemandStarting: 2, OnDemandReady: 3}
	for _, p := range c.placements {
		if p.Declared != w.Name {
			continue
		}
		s := ""
		switch p.Life {
		case LifeDispatching, LifeUnsettled, LifeLost:
			s = OnDemandStarting
		case LifePlaced:
			s = c.instanceStateLocked(p, now)
		}
		if s != "" && rank[s] > rank[state] {
			state = s
		}
	}
	if state == OnDemandCold && wantedLocked(w, c.decls[w.Name]) > 0 {
		state = OnDemandStarting
	}
	return state
}

// instanceStateLocked is a placed on-demand instance's state: starting
// until its node reports it running, then ready or idle by its activity.
// The caller holds mu.
func (c *core) instanceStateLocked(p *Placement, now time.Time) string {
	if p.HostState != ctl.StateRunning {
		return OnDemandStarting
	}
	ready, ok := c.odReady[p.DecisionID]
	if !ok {
		return OnDemandStarting
	}
	act, known := c.activityLocked(p)
	if !known {
		return OnDemandReady
	}
	if act.InFlight > 0 || now.Sub(lastUse(act, ready)) < c.conf().Tick {
		return OnDemandReady
	}
	return OnDemandIdle
}

// activityLocked is p's activity in its node's listing of this tick.
// The caller holds mu.
func (c *core) activityLocked(p *Placement) (ctl.InstanceActivity, bool) {
	n, ok := c.nodes[p.Node]
	if !ok || !n.alive || n.status == nil {
		return ctl.InstanceActivity{}, false
	}
	in, ok := findInstance(n.status, p.InstanceID)
	if !ok || in.Activity == nil {
		return ctl.InstanceActivity{}, false
	}
	return *in.Activity, true
}

// lastUse is when an instance was last used: its last request, or when
// it became ready if that is later (or it served none).
func lastUse(a ctl.InstanceActivity, ready time.Time) time.Time {
	if a.LastRequest.After(ready) {
		return a.LastRequest
	}
	return ready
}

// noteReady records, for every placed on-demand instance its node
// reports running, when the controller first saw it so (its residency
// starts then), and forgets the instances no longer placed.
func (c *lifecycle) noteReady(now time.Time) {
	od := map[string]bool{}
	for _, w := range c.conf().Workloads {
		if w.OnDemand != nil {
			od[w.Name] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.odReady {
		if p, ok := c.placements[id]; !ok || p.Life != LifePlaced {
			delete(c.odReady, id)
		}
	}
	for _, p := range c.placements {
		if !od[p.Declared] || p.Life != LifePlaced {
			continue
		}
		n, ok := c.nodes[p.Node]
		if !ok || !n.alive || n.status == nil {
			continue
		}
		in, ok := findInstance(n.status, p.InstanceID)
		if !ok || in.Lifecycle != ctl.StateRunning {
			continue
		}
		if _, seen := c.odReady[p.DecisionID]; !seen {
			c.odReady[p.DecisionID] = now
		}
	}
}

// idleUnload is one unload the reconciler chose: the placement, why,
// and the activity it was chosen on.
type idleUnload struct {
	pl  *Placement
	why string
	act ctl.InstanceActivity
}

// stillIdle keeps the chosen unloads whose node, asked again now, reports
// the instance with nothing in flight and no request since the activity
// they were chosen on; a node that does not answer keeps its instances.
func (c *lifecycle) stillIdle(ctx context.Context, chosen []idleUnload) []idleUnload {
	lists := map[string]*ctl.StatusList{}
	out := chosen[:0]
	for _, u := range chosen {
		st, asked := lists[u.pl.Node]
		if !asked {
			cctx, cancel := context.WithTimeout(ctx, c.conf().DescribeTimeout)
			s, err := c.disp.Status(cctx, u.pl.Node)
			cancel()
			if err == nil {
				st = &s
			}
			lists[u.pl.Node] = st
		}
		if st == nil {
			continue
		}
		in, ok := findInstance(st, u.pl.InstanceID)
		if !ok || in.Activity == nil || in.Activity.InFlight > 0 || in.Activity.LastRequest.After(u.act.LastRequest) {
			continue
		}
		out = append(out, u)
	}
	return out
}

// idleLocked chooses the on-demand instances to unload for idleness at
// now: placed, running, not being dispatched, on a node that answered
// this tick with their activity, no request in flight, ready for at least
// MinResidency and unused for IdleAfter. The caller holds mu.
func (c *reconciler) idleLocked(now time.Time) []idleUnload {
	ws := map[string]Workload{}
	for _, w := range c.conf().Workloads {
		if w.OnDemand != nil {
			ws[w.Name] = w
		}
	}
	var out []idleUnload
	for _, p := range c.sortedLocked() {
		w, ok := ws[p.Declared]
		if !ok || p.Life != LifePlaced || c.busy[p.DecisionID] || p.Supersedes != "" {
			continue
		}
		ready, ok := c.odReady[p.DecisionID]
		if !ok {
			continue
		}
		act, known := c.activityLocked(p)
		if !known || act.InFlight > 0 {
			continue
		}
		last := lastUse(act, ready)
		if now.Sub(ready) < w.OnDemand.MinResidency || now.Sub(last) < w.OnDemand.IdleAfter {
			continue
		}
		out = append(out, idleUnload{pl: p, act: act, why: fmt.Sprintf("idle: no request for %s (idle_after %s)",
			now.Sub(last).Truncate(time.Second), w.OnDemand.IdleAfter)})
	}
	return out
}

// idleUnload unloads the idle on-demand instances (idleLocked): each is
// retired with its reason, chained, its demand lowered (the workload
// goes back to cold when none is left) and persisted, and then unloaded
// from its node, which answered this tick.
func (c *lifecycle) idleUnload(ctx context.Context, now time.Time) error {
	c.noteReady(now)
	c.mu.Lock()
	chosen := c.rec.idleLocked(now)
	c.mu.Unlock()
	if len(chosen) == 0 {
		return nil
	}
	// The describe may be a while old: each node is asked again, and an
	// instance that served a request since, or serves one now, stays.
	chosen = c.stillIdle(ctx, chosen)
	c.mu.Lock()
	// Nothing else changed them meanwhile (a verb of the operator).
	chosen = slices.DeleteFunc(chosen, func(u idleUnload) bool {
		p, ok := c.placements[u.pl.DecisionID]
		return !ok || p.Life != LifePlaced || c.busy[p.DecisionID]
	})
	recs := make([]lifecycleRecord, len(chosen))
	for i, u := range chosen {
		recs[i] = c.w.retireLocked(u.pl, u.why)
		c.w.lowerDemandLocked(u.pl.Declared, false)
	}
	c.mu.Unlock()
	if len(chosen) == 0 {
		return nil
	}
	var errs []error
	for i, u := range chosen {
		errs = append(errs, c.w.chainRetired(recs[i], nil))
		c.met.idleUnloads.WithLabelValues(u.pl.Declared).Inc()
		c.log.Info("idle on-demand instance unloaded", zap.String("workload", u.pl.Declared), zap.String("node", u.pl.Node), zap.String("reason", u.why))
	}
	errs = append(errs, c.w.persist())
	for _, u := range chosen {
		errs = append(errs, c.orphanUnload(ctx, u.pl, now))
	}
	return errors.Join(errs...)
}
