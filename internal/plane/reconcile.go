package plane

// This file reconciles the declared workloads (Config.Workloads) every
// tick, and holds what placements need beyond an order: the intent a
// placement is made for, the separation of a workload's instances, the
// co-residency labels the engine sees, retirement.

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

// The package store of <data_dir>/store is the Store the daemon gives
// the controller.
var _ Store = (*pkg.Store)(nil)

// declState is a declared workload's progress that its placements do not
// hold: the backoff of failed attempts to place it. It is persisted.
type declState struct {
	Name string `json:"name"`
	// Attempts counts failed attempts since the last success;
	// NextAttempt is when the next may be made; LastError is the last
	// failure, chained only when it changes.
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// Since is when LastError was first given (declview.go).
	Since time.Time `json:"since,omitzero"`
	// Demanded is how many instances of an on-demand workload are
	// wanted (ondemand.go): raised by a demand, lowered by an idle unload
	// or an eviction; at most its replicas. Absent (0) in older files.
	Demanded int `json:"demanded,omitempty"`
	// DemandedAt is when the demand last rose from 0: a demand no
	// instance met within the workload's max_wait lapses (ondemand.go).
	DemandedAt time.Time `json:"demanded_at,omitzero"`
}

func (d *declState) check() error {
	switch {
	case d == nil:
		return errors.New("null declaration")
	case !grammar.ValidName(d.Name):
		return fmt.Errorf("declaration name %q is not a name", d.Name)
	case d.Attempts < 0:
		return fmt.Errorf("declaration %s: negative attempts", d.Name)
	case d.Demanded < 0 || d.Demanded > MaxReplicas:
		return fmt.Errorf("declaration %s: demanded %d outside 0..%d", d.Name, d.Demanded, MaxReplicas)
	}
	return nil
}

// replicas is the number of instances w keeps: Replicas, 1 when unset.
func (w Workload) replicas() int {
	return max(w.Replicas, 1)
}

// validateWorkloads reports every problem of the declared workloads.
func validateWorkloads(ws []Workload) []error {
	var errs []error
	seen := map[string]bool{}
	node := func(i int, field, id string) {
		if id == "" || len(id) > engine.MaxTextLen || !grammar.PrintableASCII(id) {
			errs = append(errs, fmt.Errorf("workloads[%d].%s: %q is not a node id", i, field, id))
		}
	}
	for i, w := range ws {
		if !grammar.ValidName(w.Name) {
			errs = append(errs, fmt.Errorf("workloads[%d].name: %q is not a valid name", i, w.Name))
		}
		if seen[w.Name] {
			errs = append(errs, fmt.Errorf("workloads[%d].name: %s is declared twice", i, w.Name))
		}
		seen[w.Name] = true
		if !grammar.ValidName(w.Package) {
			errs = append(errs, fmt.Errorf("workloads[%d].package: %q is not a package id", i, w.Package))
		}
		if w.Version != "" && !grammar.ValidVersion(w.Version) {
			errs = append(errs, fmt.Errorf("workloads[%d].version: %q is not a package version", i, w.Version))
		}
		if w.Variant != "" && !grammar.ValidName(w.Variant) {
			errs = append(errs, fmt.Errorf("workloads[%d].variant: %q is not a variant name", i, w.Variant))
		}
		if w.Node != "" {
			node(i, "node", w.Node)
		}
		for _, n := range w.Prefer {
			node(i, "prefer", n)
		}
		for _, n := range w.Avoid {
			node(i, "avoid", n)
		}
		switch {
		case w.Replicas < 0 || w.Replicas > MaxReplicas:
			errs = append(errs, fmt.Errorf("workloads[%d].replicas: %d outside 1..%d", i, w.Replicas, MaxReplicas))
		case w.Replicas > 1 && w.Node != "":
			errs = append(errs, fmt.Errorf("workloads[%d]: %d replicas pinned to node %s: replicas go on distinct nodes", i, w.Replicas, w.Node))
		}
		errs = append(errs, w.OnDemand.validate(i)...)
	}
	return errs
}

// intent is what a placement is made for beyond its order.
type intent struct {
	// reason is the decision's reason (operator, node_dead, declared, ...).
	reason string
	// replaces is the lost placement a reschedule replaces.
	replaces *Placement
	// supersedes is the placement of an older version that an upgrade
	// replaces once the new one runs healthy.
	supersedes *Placement
	// declared and replica name the declared workload's replica placed.
	declared string
	replica  int
	// notes are the explanation's lines beyond the engine's and the
	// reconciler's: what was evicted for it (swap.go).
	notes []string
}

func (in intent) replacesID() string {
	if in.replaces == nil {
		return ""
	}
	return in.replaces.DecisionID
}

func (in intent) supersedesID() string {
	if in.supersedes == nil {
		return ""
	}
	return in.supersedes.DecisionID
}

// over is the placement the new one takes over from: its node is not
// taken by it.
func (in intent) over() *Placement {
	if in.replaces != nil {
		return in.replaces
	}
	return in.supersedes
}

// engineInstance is the placement as the engine sees it on its node: a
// neighbour with its package's co-residency labels.
func (p *Placement) engineInstance() engine.Instance {
	return engine.Instance{Kind: p.Kind, Name: p.Workload, Labels: p.Labels, Excludes: p.Excludes}
}

// refuseRecord is the payload of KindRefuse for a package or declared
// workload that is not placed.
type refuseRecord struct {
	Phase    string `json:"phase"`
	Workload string `json:"workload,omitempty"`
	Package  string `json:"package,omitempty"`
	Version  string `json:"version,omitempty"`
	Dir      string `json:"package_dir,omitempty"`
	Reason   string `json:"reason"`
	// Revoked is the revoked subject when the package is refused for it.
	Revoked *pkg.Subject `json:"revoked,omitempty"`
	Attempt int          `json:"attempt,omitempty"`
	Next    string       `json:"next,omitempty"`
}

// revokedSubject returns the revoked subject in err's chain, if any.
func revokedSubject(err error) *pkg.Subject {
	if ve, ok := errors.AsType[*pkg.VerifyError](err); ok && ve.Code == pkg.CodeRevoked && ve.Subject != nil {
		s := *ve.Subject
		return &s
	}
	return nil
}

// retireUnwanted retires the placed or lost instances of declared
// workloads that are no longer declared, or whose replica is beyond the
// declared count (reference: "unload what is no longer declared"). Their
// copies are unloaded by the lifecycle step when their nodes answer.
// Operators' placements are never touched; decisions still being placed
// are retired once they settle.
func (c *lifecycle) retireUnwanted() error {
	ws := map[string]Workload{}
	for _, w := range c.conf().Workloads {
		ws[w.Name] = w
	}
	c.mu.Lock()
	var recs []lifecycleRecord
	for _, p := range c.rec.sortedLocked() {
		if p.Declared == "" || c.busy[p.DecisionID] || (p.Life != LifePlaced && p.Life != LifeLost) {
			continue
		}
		why := ""
		if w, ok := ws[p.Declared]; !ok {
			why = "workload " + p.Declared + " is no longer declared"
		} else if p.Replica >= w.replicas() {
			why = fmt.Sprintf("workload %s scaled down to %d replicas", p.Declared, w.replicas())
		}
		if why == "" || c.rec.replacementPendingLocked(p) {
			continue
		}
		recs = append(recs, c.w.retireLocked(p, why))
	}
	for name := range c.decls {
		if _, ok := ws[name]; !ok {
			delete(c.decls, name)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, r := range recs {
		errs = append(errs, c.w.chainRetired(r, nil))
	}
	return errors.Join(errs...)
}

// upgradeLost settles a lost instance that is part of an upgrade instead
// of rescheduling it (done true): a new version lost before it ran
// healthy is retired (the old one stays; the upgrade is tried again); an
// old version that a new one supersedes is retired (the new one takes
// its replica). Either way the replica never gets a third instance.
func (c *lifecycle) upgradeLost(pl *Placement) (done bool, err error) {
	c.mu.Lock()
	var rec lifecycleRecord
	switch {
	case pl.Supersedes != "":
		rec = c.w.retireLocked(pl, "a new version lost before it ran healthy; the version it was to replace stays")
		done = true
	default:
		for _, n := range c.placements {
			if n.Supersedes == pl.DecisionID && n.Life != LifeRetiring {
				n.Supersedes = ""
				rec = c.w.retireLocked(pl, "lost while version "+n.Version+" (decision "+n.DecisionID[:12]+") was replacing it")
				done = true
				break
			}
		}
	}
	c.mu.Unlock()
	if !done {
		return false, nil
	}
	return true, c.w.chainRetired(rec, nil)
}

// reconcileDeclared reconciles every declared workload (after the lifecycle
// steps of the tick).
func (c *lifecycle) reconcileDeclared(ctx context.Context, now time.Time) error {
	var errs []error
	for _, w := range c.conf().Workloads {
		if ctx.Err() != nil {
			break
		}
		errs = append(errs, c.reconcileWorkload(ctx, w, now))
	}
	c.w.updateDeclGauge()
	return errors.Join(errs...)
}

// reconcileWorkload keeps w's replicas: it finishes upgrades whose new
// instance runs healthy, then (outside the backoff of failed attempts)
// places every missing replica, then replaces one outdated instance with
// the resolved version (one at a time: the next once this one is healthy
// and the old one retired).
func (c *lifecycle) reconcileWorkload(ctx context.Context, w Workload, now time.Time) error {
	err := c.finishUpgrades(ctx, w.Name, now)
	c.mu.Lock()
	st := c.decls[w.Name]
	if st == nil {
		st = &declState{Name: w.Name}
		c.decls[w.Name] = st
	}
	// An on-demand workload keeps as many as are demanded (ondemand.go).
	lapsed := c.rec.lapsedLocked(w, st, now)
	if lapsed {
		c.w.lowerDemandLocked(w.Name, true)
	}
	n := wantedLocked(w, st)
	wait := now.Before(st.NextAttempt)
	filled := make([]bool, n)
	upgrading := false
	for _, p := range c.placements {
		if p.Declared != w.Name {
			continue
		}
		switch p.Life {
		case LifeDispatching, LifeUnsettled, LifePlaced, LifeLost:
			if p.Replica < n {
				filled[p.Replica] = true
			}
		}
		upgrading = upgrading || p.Supersedes != ""
	}
	c.mu.Unlock()
	if lapsed {
		c.log.Info("on-demand workload's demand lapsed", zap.String("workload", w.Name), zap.Duration("max_wait", w.OnDemand.MaxWait))
		err = errors.Join(err, c.w.persist())
	}
	var missing []int
	for i, f := range filled {
		if !f {
			missing = append(missing, i)
		}
	}
	if wait || (len(missing) == 0 && upgrading) {
		return err
	}
	p, dir, perr := c.resolveDeclared(ctx, w)
	if perr != nil {
		return errors.Join(err, c.w.declFailed(w, "", perr.Error(), perr))
	}
	failed := false
	for _, slot := range missing {
		ok, perr := c.placeDeclared(ctx, w, p, dir, slot, nil)
		err = errors.Join(err, perr)
		if !ok {
			failed = true
			break
		}
		if w.OnDemand != nil {
			c.met.coldStarts.WithLabelValues(w.Name).Inc()
			c.mu.Lock()
			st.DemandedAt = time.Time{} // met: it no longer lapses
			c.mu.Unlock()
		}
	}
	if len(missing) > 0 && !failed {
		// Placed what was missing; upgrades go on from the next tick.
		c.w.declOK(w.Name)
		return err
	}
	if upgrading {
		return err
	}
	old := c.rec.outdated(w.Name, p.Verified().ManifestHash)
	if old == nil {
		if !failed {
			c.w.declOK(w.Name)
		}
		return err
	}
	// The backoff is cleared once the new instance runs healthy
	// (finishUpgrades), not when it is placed.
	_, perr = c.placeDeclared(ctx, w, p, dir, old.Replica, old)
	return errors.Join(err, perr)
}

// finishUpgrades advances the upgrades of workload name: a new instance
// that its node reports running (as mirrored this tick) retires the one
// it supersedes, which is unloaded at once when its node answers; a new
// instance its node reports failed is retired instead (the old one
// stays, and the upgrade is tried again after the backoff).
func (c *lifecycle) finishUpgrades(ctx context.Context, name string, now time.Time) error {
	type step struct {
		nu, old *Placement
		failed  bool
	}
	var steps []step
	c.mu.Lock()
	for _, nu := range c.rec.sortedLocked() {
		if nu.Declared != name || nu.Supersedes == "" {
			continue
		}
		old, ok := c.placements[nu.Supersedes]
		if !ok || old.Life == LifeRetiring || old.Life == LifeRescheduled {
			nu.Supersedes = "" // nothing left to replace
			continue
		}
		if nu.Life != LifePlaced {
			continue
		}
		n := c.nodes[nu.Node]
		if n == nil || !n.alive || n.status == nil {
			continue
		}
		in, listed := findInstance(n.status, nu.InstanceID)
		switch {
		case listed && in.Lifecycle == ctl.StateRunning:
			steps = append(steps, step{nu: nu, old: old})
		case listed && in.Lifecycle == ctl.StateFailed:
			steps = append(steps, step{nu: nu, old: old, failed: true})
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, s := range steps {
		if s.failed {
			errs = append(errs, c.w.retire(s.nu, "version "+s.nu.Version+" failed on its node; version "+s.old.Version+" stays", nil))
			if w, ok := c.rec.declared(name); ok {
				errs = append(errs, c.w.declFailed(w, s.nu.Version, "upgrade to "+s.nu.Version+" failed: the new instance failed on "+s.nu.Node, nil))
			}
			continue
		}
		c.mu.Lock()
		s.nu.Supersedes = ""
		rec := c.w.retireLocked(s.old, "superseded by version "+s.nu.Version+" on "+s.nu.Node+" (decision "+s.nu.DecisionID[:12]+")")
		mrec := migrateRecord{Reason: "upgrade", Workload: s.old.Workload, FromNode: s.old.Node, FromInstance: s.old.InstanceID,
			ToNode: s.nu.Node, ToInstance: s.nu.InstanceID, DecisionID: s.nu.DecisionID}
		c.mu.Unlock()
		c.w.declOK(name)
		errs = append(errs, c.w.chainRetired(rec, nil))
		_, cerr := c.w.appendChain(KindMigrate, mrec)
		errs = append(errs, cerr, c.w.persist())
		if c.rec.nodeOf(s.old.Node, now).alive {
			errs = append(errs, c.orphanUnload(ctx, s.old, now))
		}
	}
	return errors.Join(errs...)
}

// resolveDeclared resolves w's package in the store and verifies it.
func (c *lifecycle) resolveDeclared(ctx context.Context, w Workload) (Package, string, error) {
	if c.store == nil {
		return nil, "", errors.New("no package store")
	}
	dir, version, err := c.store.Resolve(w.Package, w.Version)
	if err != nil {
		return nil, "", fmt.Errorf("package store: %w", err)
	}
	p, err := c.disp.VerifyPackage(ctx, dir)
	if err != nil {
		return nil, "", fmt.Errorf("package %s %s refused: %w", w.Package, version, err)
	}
	m := p.Verified().Manifest
	if m.ID != w.Package || m.Version != version {
		return nil, "", fmt.Errorf("package store: %s %s holds package %s %s", w.Package, version, m.ID, m.Version)
	}
	if _, ok := m.Variant(w.Variant); w.Variant != "" && !ok {
		return nil, "", fmt.Errorf("package %s %s has no variant %s", m.ID, m.Version, w.Variant)
	}
	return p, dir, nil
}

// declaredOrder is the order a declared workload's replicas are placed
// with.
func declaredOrder(w Workload, dir string) Order {
	return Order{
		Name: w.Name, PackageDir: dir, Config: ctl.InstanceConfig{Workload: w.Name}, Start: true,
		Pin: w.Node, Prefer: slices.Clone(w.Prefer), Avoid: slices.Clone(w.Avoid), Variant: w.Variant,
		AllowEmulated: w.AllowEmulated,
	}
}

// placeDeclared places replica slot of w (replacing old, for an upgrade).
// ok is false when nothing was placed (the failure is recorded with its
// backoff); a decision that stays unplaceable for the same reason is
// evaluated but not chained again.
func (c *lifecycle) placeDeclared(ctx context.Context, w Workload, p Package, dir string, slot int, old *Placement) (ok bool, err error) {
	o := declaredOrder(w, dir)
	in := intent{reason: "declared", declared: w.Name, replica: slot, supersedes: old}
	switch {
	case old != nil:
		in.reason = "upgrade"
	case w.OnDemand != nil:
		in.reason = "on_demand"
	}
	version := p.Verified().Manifest.Version
	previewed := ""
	var swapRetry time.Time // when a swap waits on a protection that lapses
	now := c.now()
	if w.OnDemand != nil && old == nil {
		c.mu.Lock()
		in.notes = c.evictedFor[w.Name]
		delete(c.evictedFor, w.Name)
		c.mu.Unlock()
	}
	if req, dec, err := c.rec.evaluate(p, o, in, now); dec.Chosen == nil {
		if old == nil && w.OnDemand != nil && err == nil {
			// No node fits: the swap may make room, and the next tick
			// (woken) places it.
			done, retryAt, serr := c.swap(ctx, w, req, now)
			if done || serr != nil {
				return false, serr
			}
			swapRetry = retryAt
		}
		previewed = c.rec.declUnplaceable(p, dec, err)
		c.mu.Lock()
		same := c.decls[w.Name] != nil && c.decls[w.Name].LastError == previewed
		c.mu.Unlock()
		if same {
			err := c.w.declFailed(w, version, previewed, nil)
			c.retryAtLapse(w.Name, swapRetry)
			return false, err
		}
	}
	rep, err := c.w.place(ctx, p, o, in, c.conf().RescheduleTimeout)
	switch {
	case rep.Placed != nil || rep.Unsettled:
		return true, err
	case rep.DecisionID == "":
		why := previewed
		if why == "" && err != nil {
			why = err.Error()
		}
		return false, errors.Join(err, c.w.declFailed(w, version, why, nil))
	case rep.Decision.Chosen == nil:
		err = errors.Join(err, c.w.declFailed(w, version, c.rec.declUnplaceable(p, rep.Decision, nil), nil))
		c.retryAtLapse(w.Name, swapRetry)
		return false, err
	default:
		return false, errors.Join(err, c.w.declFailed(w, version, exhausted(rep.Attempts), nil))
	}
}

// unplaceable is the reason an engine decision placed nothing, stable
// while the reason is: the rejection codes per node, not their details.
func unplaceable(dec engine.Decision, err error) string {
	if err != nil {
		if _, pin := errors.AsType[*engine.PinIneligibleError](err); !pin {
			return "not placeable: " + err.Error()
		}
	}
	var b strings.Builder
	b.WriteString("no eligible node")
	if dec.Pin != "" {
		b.WriteString(" (pinned to " + dec.Pin + ")")
	}
	cands := slices.Clone(dec.Candidates)
	slices.SortFunc(cands, func(a, b engine.Candidate) int { return strings.Compare(a.Node, b.Node) })
	sep := ": "
	for _, cd := range cands {
		if cd.Eligible() {
			continue
		}
		codes := make([]string, len(cd.Rejections))
		for i, r := range cd.Rejections {
			codes[i] = string(r.Code)
		}
		b.WriteString(sep + cd.Node + " " + strings.Join(codes, ","))
		sep = "; "
	}
	if len(cands) == 0 {
		b.WriteString(": no targets")
	}
	return b.String()
}

// exhausted is the reason a dispatch placed nothing: the outcome per
// candidate.
func exhausted(as []Attempt) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = a.Node + " " + a.Outcome
		if a.Code != "" {
			parts[i] += " (" + string(a.Code) + ")"
		}
	}
	return "every candidate refused or was unreachable: " + strings.Join(parts, "; ")
}

// retryAtLapse brings the next attempt of on-demand workload name forward
// to at, when a swap found the instance that would make room protected
// (its grace or min_residency) until then: waiting for the doubling
// backoff would leave the demand waiting past the moment room can be
// made. A zero at, or one after the backoff's, changes nothing.
func (c *lifecycle) retryAtLapse(name string, at time.Time) {
	if at.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.decls[name]; st != nil && at.Before(st.NextAttempt) {
		st.NextAttempt = at
	}
}
