package plane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

// lifecycleRecord is the payload of KindLifecycle, KindAlert and
// KindOrphan.
type lifecycleRecord struct {
	DecisionID string `json:"decision_id"`
	InstanceID string `json:"instance_id"`
	Node       string `json:"node"`
	Workload   string `json:"workload"`
	From       string `json:"from,omitempty"`
	To         string `json:"to,omitempty"`
	Reason     string `json:"reason"`
	Attempt    int    `json:"attempt,omitempty"`
	// Revoked is the revoked subject that retired the instance, if any.
	Revoked *pkg.Subject `json:"revoked,omitempty"`
}

// migrateRecord is the payload of KindMigrate.
type migrateRecord struct {
	Reason       string `json:"reason"`
	Workload     string `json:"workload"`
	FromNode     string `json:"from_node"`
	FromInstance string `json:"from_instance"`
	ToNode       string `json:"to_node"`
	ToInstance   string `json:"to_instance"`
	DecisionID   string `json:"decision_id"`
}

// described is one target's answer in a tick.
type described struct {
	id     string
	err    error
	status *ctl.StatusList
	desc   Description
}

// Tick runs one lifecycle pass (reference 4.4): describe every target at
// once, each within DescribeTimeout; settle unsettled decisions; mirror
// instance states; mark the instances of dead nodes lost and reschedule
// them; unload replaced copies on returning nodes; take back instances
// whose node returns with them; reconcile the declared workloads
// (retiring what is no longer declared first, placing what is missing
// and replacing outdated versions last); persist. Failures are chained,
// counted and retried on later ticks; Tick returns the joined errors of
// the chain and the state file only. It first applies what Reconfigure
// handed over and Run has not applied yet.
func (c *Controller) Tick(ctx context.Context) error {
	if c.lead.src != nil {
		c.followLead(ctx)
	}
	c.life.tickMu.Lock()
	defer c.life.tickMu.Unlock()
	// What a reload or a refresh handed over and Run has not applied yet
	// (no Run: a test ticks itself).
	c.applyPending()
	if !c.leads() {
		// A follower describes nothing and changes nothing.
		return nil
	}
	return c.life.tick(ctx)
}

// tick is one lifecycle pass (Tick); the caller holds tickMu.
func (c *lifecycle) tick(ctx context.Context) error {
	start := c.now()
	defer func() { c.met.tick.Observe(c.now().Sub(start).Seconds()) }()

	c.mu.Lock()
	c.listedAt = c.verbs
	maps.DeleteFunc(c.verbAt, func(_ string, at uint64) bool { return at <= c.listedAt })
	c.mu.Unlock()
	c.describeAll(ctx)
	now := c.now()
	c.mu.Lock()
	c.w.wakeBackoffsLocked()
	c.mu.Unlock()
	errs := []error{c.retireUnwanted()}
	for _, pl := range c.sortedPlacements() {
		if ctx.Err() != nil {
			break
		}
		errs = append(errs, c.step(ctx, pl, now))
	}
	c.learnRoles(ctx)
	errs = append(errs, c.idleUnload(ctx, now))
	errs = append(errs, c.reconcileDeclared(ctx, now))
	c.kp.pruneKept()
	c.w.updateGauges()
	errs = append(errs, c.w.persist())
	return errors.Join(errs...)
}

// describeAll describes every target concurrently and records liveness,
// facts and instance listings.
func (c *lifecycle) describeAll(ctx context.Context) {
	c.mu.Lock()
	ids := make([]string, 0, len(c.nodes))
	holds := map[string]bool{}
	for id := range c.nodes {
		ids = append(ids, id)
	}
	for _, p := range c.placements {
		holds[p.Node] = true
	}
	c.mu.Unlock()
	slices.Sort(ids)
	out := make([]described, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, c.conf().DescribeTimeout)
			defer cancel()
			d, err := c.disp.Describe(cctx, id)
			r := described{id: id, err: err, desc: d, status: d.Status}
			if err == nil && r.status == nil && holds[id] {
				st, serr := c.disp.Status(cctx, id)
				if serr == nil {
					r.status = &st
				}
			}
			out[i] = r
		}()
	}
	wg.Wait()
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range out {
		n, ok := c.nodes[r.id]
		if !ok {
			continue
		}
		wasAlive := n.alive
		n.alive, n.status = false, nil
		if r.err != nil {
			continue
		}
		if err := n.ingestFacts(r.desc.Facts, now); err != nil && !errors.Is(err, ErrStaleFacts) {
			continue
		}
		if !wasAlive {
			// Room may have come back: the backoffs end (wakeBackoffs).
			c.wake = true
		}
		n.stopped = false
		n.alive, n.lastContact, n.status = true, now, r.status
		n.described, n.host, n.hostNote = true, r.desc.Host, r.desc.HostNote
	}
}

func (c *lifecycle) sortedPlacements() []*Placement {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := make([]*Placement, 0, len(c.placements))
	for _, p := range c.placements {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *Placement) int { return strings.Compare(a.DecisionID, b.DecisionID) })
	return ps
}

// nodeView is what a tick knows of a placement's node. A node that is not
// a target (known false) is never alive, and dead once DeadAfter has
// passed since its last contact (Controller.gone).
type nodeView struct {
	known  bool
	alive  bool
	dead   bool
	status *ctl.StatusList
}

// Reasons a placed instance is lost for its node.
const (
	lostNodeDead  = "node is dead"
	lostNotTarget = "node is no longer a target (not in mesh.peers) and has not been heard from for dead_after"
)

// step advances one placement.
func (c *lifecycle) step(ctx context.Context, pl *Placement, now time.Time) error {
	c.mu.Lock()
	if _, still := c.placements[pl.DecisionID]; !still || c.busy[pl.DecisionID] || c.verbAt[pl.DecisionID] > c.listedAt {
		c.mu.Unlock()
		return nil
	}
	life := pl.Life
	c.mu.Unlock()
	nv := c.rec.nodeOf(pl.Node, now)
	if !nv.known && !nv.dead {
		return nil
	}
	deadWhy := lostNodeDead
	if !nv.known {
		deadWhy = lostNotTarget
	}
	switch life {
	case LifeDispatching, LifeUnsettled:
		return c.settle(ctx, pl, nv)
	case LifePlaced:
		switch {
		case nv.alive:
			return c.mirror(ctx, pl, nv, now)
		case nv.dead:
			c.mu.Lock()
			pl.WasRunning = live(pl.HostState)
			c.mu.Unlock()
			if err := c.w.transition(pl, LifeLost, deadWhy); err != nil {
				return err
			}
			return c.reschedule(ctx, pl, true, now)
		}
	case LifeLost:
		switch {
		case nv.alive:
			return c.rejoin(ctx, pl, nv, now)
		case nv.dead:
			return c.reschedule(ctx, pl, true, now)
		}
	case LifeRescheduled, LifeRetiring:
		if nv.alive {
			return c.orphanUnload(ctx, pl, now)
		}
	}
	return nil
}

// departedReason says whether a listing names iid as taken down on
// purpose.
func departedReason(st *ctl.StatusList, iid string) (string, bool) {
	for _, d := range st.Departed {
		if d.InstanceID == iid {
			return d.Reason, true
		}
	}
	return "", false
}

func findInstance(st *ctl.StatusList, iid string) (ctl.InstanceStatus, bool) {
	for _, in := range st.Instances {
		if in.InstanceID == iid {
			return in, true
		}
	}
	return ctl.InstanceStatus{}, false
}

// mirror copies the host's state of a placed instance on a node that
// answers (reference 4.4 step 3).
func (c *lifecycle) mirror(ctx context.Context, pl *Placement, nv nodeView, now time.Time) error {
	if nv.status == nil {
		return nil
	}
	if in, ok := findInstance(nv.status, pl.InstanceID); ok {
		c.mu.Lock()
		pl.HostState = in.Lifecycle
		if live(in.Lifecycle) {
			pl.WasRunning = true
			pl.Stopped = false // started again
		}
		c.mu.Unlock()
		return c.restartFailed(ctx, pl, in, now)
	}
	if why, ok := departedReason(nv.status, pl.InstanceID); ok {
		return c.w.forget(pl, "no longer on its node: "+why)
	}
	c.mu.Lock()
	wasLive := live(pl.HostState)
	pl.WasRunning = wasLive
	c.mu.Unlock()
	if !wasLive {
		return c.w.forget(pl, "no longer on its node")
	}
	if err := c.w.transition(pl, LifeLost, "instance missing though its node is up (restart?)"); err != nil {
		return err
	}
	return c.reschedule(ctx, pl, false, now)
}

// rejoin handles a lost instance whose node answers again (reference 4.7).
func (c *lifecycle) rejoin(ctx context.Context, pl *Placement, nv nodeView, now time.Time) error {
	if nv.status == nil {
		return nil
	}
	if c.replacementPending(pl) {
		// A replacement is being placed; whatever it becomes, this copy is
		// settled by it (an orphan unload if it places).
		return nil
	}
	if in, ok := findInstance(nv.status, pl.InstanceID); ok {
		c.mu.Lock()
		pl.HostState = in.Lifecycle
		pl.Attempts, pl.LastError, pl.NextAttempt = 0, "", time.Time{}
		c.mu.Unlock()
		return c.w.transition(pl, LifePlaced, "node rejoined with the instance")
	}
	if why, ok := departedReason(nv.status, pl.InstanceID); ok {
		return c.w.forget(pl, "taken down while unreachable: "+why)
	}
	return c.reschedule(ctx, pl, false, now)
}

// replacedNodeAnswers reports whether pl replaces a lost instance whose
// node answered in this tick.
func (c *lifecycle) replacedNodeAnswers(pl *Placement) bool {
	c.mu.Lock()
	old, ok := c.placements[pl.Replaces]
	lost := ok && pl.Replaces != "" && old.Life == LifeLost
	var node string
	if lost {
		node = old.Node
	}
	c.mu.Unlock()
	return lost && c.rec.nodeOf(node, c.now()).alive
}

// replacementPending reports whether pl's replacement is still being
// placed.
func (c *lifecycle) replacementPending(pl *Placement) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pl.ReplacedBy == "" {
		return false
	}
	r, ok := c.placements[pl.ReplacedBy]
	return ok && (r.Life == LifeDispatching || r.Life == LifeUnsettled)
}

// reschedule places a lost instance again (reference 4.5): avoiding its
// node when that is dead, with backoff after failures. Failed attempts
// never stop; successful moves stop at MaxReschedules.
func (c *lifecycle) reschedule(ctx context.Context, pl *Placement, nodeDead bool, now time.Time) error {
	if done, err := c.upgradeLost(pl); done {
		return err
	}
	c.mu.Lock()
	wait := now.Before(pl.NextAttempt)
	wasRunning, order, lostOn := pl.WasRunning, pl.Order, pl.Node
	n := len(c.rec.movesWithin(pl.Moves, now))
	c.mu.Unlock()
	if wait || c.replacementPending(pl) {
		return nil
	}
	// Past the cap a lost instance may still start again where it was
	// (its node answers without it): that is not a move.
	capped := n >= c.conf().MaxReschedules
	var block string
	switch {
	case !wasRunning:
		block = "lost, not placed again: it was not running when it was lost"
	case order == nil:
		block = "lost, not placed again: no stored placement order (adopted instance)"
	case capped && nodeDead:
		block = c.rec.capReason(pl, n)
	case order.Pin != "" && nodeDead:
		block = "lost, not placed again: pinned to " + order.Pin
	}
	if block != "" {
		if capped && nodeDead && wasRunning && order != nil {
			c.w.setCapped(pl, n)
		}
		isNew, err := c.w.alert(pl, block)
		if isNew {
			c.met.reschedule.WithLabelValues(outBlocked).Inc()
		}
		return err
	}
	if !capped {
		c.w.uncapped(pl)
	}
	o := *order
	o.DryRun = false
	o.Avoid = slices.Clone(o.Avoid)
	switch {
	case nodeDead:
		o.Avoid = append(o.Avoid, lostOn)
	case capped:
		// Only a restart on its own node, which is no move.
		o.Pin = lostOn
	}
	reason := "instance_lost"
	if nodeDead {
		reason = "node_dead"
	}
	p, err := c.kp.placedPackage(ctx, &o, pl.ManifestHash)
	if pkg.ErrorCode(err) == pkg.CodeRevoked {
		// A revoked workload is never placed again: its copy is unloaded
		// if its node answers with it.
		return c.w.retire(pl, "package revoked: "+err.Error(), err)
	}
	if err != nil {
		c.rescheduleFailed(pl, "package: "+err.Error())
		return nil
	}
	rep, err := c.w.place(ctx, p, o, intent{reason: reason, replaces: pl}, c.conf().RescheduleTimeout)
	if err != nil && rep.DecisionID == "" {
		c.rescheduleFailed(pl, err.Error())
		return nil
	}
	if rep.DecisionID != "" && rep.Placed == nil && !rep.Unsettled {
		c.mu.Lock()
		_, inFlight := c.placements[rep.DecisionID]
		c.mu.Unlock()
		if !inFlight && (rep.Decision.Chosen == nil) {
			c.rescheduleFailed(pl, "no eligible node")
		}
	}
	return err
}

// rescheduleFailed records a failed reschedule: backoff doubling to
// MaxBackoff, a refusal chained when the reason is new, and an alert when
// the attempts reach MaxReschedules. It never gives up.
func (c *lifecycle) rescheduleFailed(pl *Placement, why string) {
	now := c.now()
	c.mu.Lock()
	pl.ReplacedBy = ""
	pl.Attempts++
	pl.NextAttempt = now.Add(backoff(c.conf().RetryBackoff, pl.Attempts))
	attempt := pl.Attempts
	isNew := pl.LastError != why
	pl.LastError = why
	rec := lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node, Workload: pl.Workload,
		Reason: "reschedule failed: " + why, Attempt: attempt}
	c.mu.Unlock()
	c.met.reschedule.WithLabelValues(outFailed).Inc()
	if isNew {
		// Best effort: the backoff holds whether or not this is chained.
		_, _ = c.w.appendChain(KindRefuse, rec)
	}
	if attempt == c.conf().MaxReschedules {
		rec.Reason = fmt.Sprintf("no node after %d attempts; still retrying with backoff (at most every %s)", attempt, MaxBackoff)
		_, _ = c.w.appendChain(KindAlert, rec)
	}
}

// orphanUnload unloads a replaced copy from a node that answers again
// (reference 4.6), or a retiring instance from its node.
func (c *lifecycle) orphanUnload(ctx context.Context, pl *Placement, now time.Time) error {
	c.mu.Lock()
	wait := now.Before(pl.NextAttempt)
	node, iid, life, why := pl.Node, pl.InstanceID, pl.Life, pl.RetireReason
	c.mu.Unlock()
	kind, done, failed := KindOrphan, "orphan unloaded", "replaced copy not unloaded on the returned node: "
	if life == LifeRetiring {
		kind, done, failed = KindLifecycle, "unloaded: "+why, "retired instance not unloaded: "
	}
	if wait {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, c.conf().DescribeTimeout)
	err := c.disp.Unload(cctx, node, iid)
	cancel()
	var ce *ctl.CallError
	if err == nil || (errors.As(err, &ce) && ce.Refusal != nil && ce.Refusal.Code == ctl.CodeUnknownInstance) {
		c.mu.Lock()
		delete(c.placements, pl.DecisionID)
		rec := lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: iid, Node: node, Workload: pl.Workload,
			From: string(life), To: "unloaded", Reason: done}
		c.mu.Unlock()
		_, cerr := c.w.appendChain(kind, rec)
		return cerr
	}
	c.mu.Lock()
	pl.Attempts++
	pl.NextAttempt = now.Add(backoff(c.conf().RetryBackoff, pl.Attempts))
	c.mu.Unlock()
	_, aerr := c.w.alert(pl, failed+err.Error())
	return aerr
}

// settle settles a decision whose place went unanswered (or was under way
// at a crash), once its node answers: the instance is there (adopt it),
// the node is still handling it (wait), or it is not (carry on down the
// candidates).
func (c *lifecycle) settle(ctx context.Context, pl *Placement, nv nodeView) error {
	if !nv.alive {
		return nil
	}
	c.mu.Lock()
	pl.Life = LifeUnsettled
	id, iid := pl.DecisionID, pl.InstanceID
	c.mu.Unlock()
	var st ctl.StatusList
	if nv.status != nil {
		st = *nv.status
	} else {
		cctx, cancel := context.WithTimeout(ctx, c.conf().DescribeTimeout)
		s, err := c.disp.Status(cctx, pl.Node)
		cancel()
		if err != nil {
			return nil
		}
		st = s
	}
	found, state, settled, _ := matchStatus(st, id, iid)
	switch {
	case found:
		c.met.dispatches.WithLabelValues(outAdopted).Inc()
		return c.w.settled(ctx, pl, KindAdopted, iid, state, 0)
	case !settled:
		return nil
	case c.replacedNodeAnswers(pl):
		// The node of the instance this one would replace answers again:
		// it rejoins or is placed again from there, not here.
		c.w.abandon(pl, "the node of the replaced instance answers again")
		return nil
	}
	c.mu.Lock()
	next := pl.Cursor + 1
	order := pl.Order
	c.mu.Unlock()
	if order == nil || next >= len(pl.Candidates) {
		c.w.abandon(pl, "the unanswered place did not place the instance")
		return nil
	}
	p, err := c.kp.placedPackage(ctx, order, pl.ManifestHash)
	if err != nil {
		c.w.abandon(pl, "package: "+err.Error())
		return nil
	}
	c.mu.Lock()
	pl.Cursor = next
	c.busy[id] = true
	c.mu.Unlock()
	_, err = c.w.dispatch(ctx, p, *order, pl, c.conf().RescheduleTimeout)
	c.mu.Lock()
	delete(c.busy, id)
	c.mu.Unlock()
	return err
}
