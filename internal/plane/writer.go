package plane

// The writer: the one applier of decisions. It chains, persists and
// dispatches (dispatch.go), and every change of a placement's life goes
// through it.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
)

// snapshotLocked copies the placements and declarations for encoding
// without mu: each struct is copied (one allocation for all), the slices
// and orders they point to are shared (they are replaced, never changed
// in place). The caller holds mu.
func (c *writer) snapshotLocked() ([]*Placement, []*declState) {
	vals := make([]Placement, 0, len(c.placements))
	for _, p := range c.placements {
		vals = append(vals, *p)
	}
	ps := make([]*Placement, len(vals))
	for i := range vals {
		ps[i] = &vals[i]
	}
	dvals := make([]declState, 0, len(c.decls))
	for _, d := range c.decls {
		dvals = append(dvals, *d)
	}
	ds := make([]*declState, len(dvals))
	for i := range dvals {
		ds[i] = &dvals[i]
	}
	return ps, ds
}

// persist saves the state: the whole state file (the file store), or
// what changed since the last save (a delta store). Callers do not hold
// mu; it is held only to copy the state, not to encode it.
func (c *writer) persist() error {
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	if c.file != nil {
		c.mu.Lock()
		ps, ds := c.snapshotLocked()
		c.mu.Unlock()
		return c.file.save(ps, ds)
	}
	// A delta store: only what changed is copied and encoded.
	c.mu.Lock()
	changed, removed, reset := c.delta.scanLocked(c.placements)
	ds := c.declsLocked()
	decs := c.decisions
	c.decisions = nil
	c.mu.Unlock()
	ch, err := c.delta.build(changed, removed, reset, ds, decs)
	if err == nil && !ch.Empty() {
		err = c.saveChange(ch)
	}
	if err != nil {
		c.delta.stale = true
		c.mu.Lock()
		// Sent again with the next save (a Reset keeps the store's).
		c.decisions = append(decs, c.decisions...)
		c.decisions = c.decisions[max(0, len(c.decisions)-MaxReplicaDecisions):]
		c.mu.Unlock()
		return err
	}
	return nil
}

// declsLocked copies the declarations' progress; the caller holds mu.
func (c *core) declsLocked() []*declState {
	out := make([]*declState, 0, len(c.decls))
	for _, d := range c.decls {
		cp := *d
		out = append(out, &cp)
	}
	return out
}

// saveChange hands ch to the store, bounded by PlaceTimeout.
func (c *writer) saveChange(ch StateChange) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.conf().PlaceTimeout)
	defer cancel()
	if err := c.state.Save(ctx, ch); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// appendChain chains one record.
func (c *writer) appendChain(kind string, payload any) (string, error) {
	e, err := c.chain.Append(ChainSource, kind, payload)
	if err != nil {
		return "", fmt.Errorf("chain %s: %w", kind, err)
	}
	return e.Hash, nil
}

// decide runs governance and the engine for order o and chains the
// decision. It returns the decision, its id, the ranked dispatch
// candidates and the explanation's notes (chained with it).
func (c *writer) decide(p Package, o Order, in intent) (engine.Decision, string, []Candidate, []string, error) {
	v := p.Verified()
	m := v.Manifest
	req, dec, err := c.rec.evaluate(p, o, in, c.now())
	rec := decisionRecord{
		Workload: req.Name, Kind: m.Kind, Package: m.ID, Version: m.Version,
		ManifestHash: v.ManifestHash, DryRun: o.DryRun, Reason: in.reason, Replaces: in.replacesID(),
		Supersedes: in.supersedesID(), Declared: in.declared, CurrentNode: req.CurrentNode,
		Candidates: []string{},
	}
	if in.declared != "" {
		rec.Replica = &in.replica
	}
	var pinErr *engine.PinIneligibleError
	if err != nil && !errors.As(err, &pinErr) {
		rec.Error = err.Error()
		if _, cerr := c.appendChain(KindRefuse, rec); cerr != nil {
			return engine.Decision{}, "", nil, nil, errors.Join(err, cerr)
		}
		return engine.Decision{}, "", nil, nil, fmt.Errorf("placement of %s: %w", req.Name, err)
	}
	if err != nil {
		rec.Error = err.Error()
	}
	rec.explainFields(dec)
	rec.Notes = append(c.rec.explainNotes(m, o, dec), in.notes...)
	var cands []Candidate
	if dec.Chosen != nil {
		rec.Chosen, rec.Variant = dec.Chosen.Node, dec.Chosen.Variant
		cands = append(cands, Candidate{Node: dec.Chosen.Node, Variant: dec.Chosen.Variant})
		if o.Pin == "" {
			for _, cd := range dec.Candidates {
				if cd.Eligible() && cd.Node != dec.Chosen.Node {
					cands = append(cands, Candidate{Node: cd.Node, Variant: cd.Variant})
				}
			}
		}
	}
	for _, cd := range cands {
		rec.Candidates = append(rec.Candidates, cd.Node)
	}
	for _, cd := range dec.Candidates {
		if !cd.Eligible() {
			rec.Rejected = append(rec.Rejected, cd.Node)
		}
	}
	id, cerr := c.appendChain(KindDecision, rec)
	if cerr != nil {
		return engine.Decision{}, "", nil, nil, cerr
	}
	if c.file == nil {
		// Replicated with the next save, for Explain on any controller.
		if e, err := decisionEntry(id, c.now(), rec); err == nil {
			c.mu.Lock()
			// Bounded like the store's: a burst of dry runs between two
			// saves keeps its latest.
			c.decisions = append(c.decisions, e)
			if over := len(c.decisions) - MaxReplicaDecisions; over > 0 {
				c.decisions = slices.Delete(c.decisions, 0, over)
			}
			c.mu.Unlock()
		}
	}
	return dec, id, cands, rec.Notes, nil
}

// place decides and dispatches for in: a reschedule when in.replaces is
// set (called by Tick), a declared workload's replica when in.declared
// is.
func (c *writer) place(ctx context.Context, p Package, o Order, in intent, timeout time.Duration) (rep Report, err error) {
	replaces := in.replaces
	dec, id, cands, notes, err := c.decide(p, o, in)
	if err != nil {
		c.met.placements.WithLabelValues(outError).Inc()
		return Report{}, err
	}
	rep = Report{DecisionID: id, Decision: dec, Governance: c.rec.governanceDenial(p.Verified().Manifest.Kind, dec),
		Notes: notes}
	defer func() { c.recent.add(rep) }()
	switch {
	case o.DryRun:
		c.met.placements.WithLabelValues(outDryRun).Inc()
		return rep, nil
	case len(cands) == 0:
		c.met.placements.WithLabelValues(outUnplaceable).Inc()
		return rep, nil
	}
	v := p.Verified()
	m := v.Manifest
	stored := o
	stored.DryRun = false
	if replaces != nil && replaces.Order != nil {
		stored = *replaces.Order
	}
	pl := &Placement{
		DecisionID: id, Kind: m.Kind, Workload: dec.Name, Package: m.ID, Version: m.Version,
		ManifestHash: v.ManifestHash, Candidates: cands, Life: LifeDispatching,
		Order: &stored, Declared: in.declared, Replica: in.replica, Supersedes: in.supersedesID(),
		Labels: slices.Clone(m.Labels), Excludes: slices.Clone(m.Excludes),
	}
	if replaces != nil {
		c.mu.Lock()
		pl.Replaces = replaces.DecisionID
		// Counted as a move once placed on another node (settled).
		pl.Moves = replaces.Moves
		pl.Declared, pl.Replica = replaces.Declared, replaces.Replica
		c.mu.Unlock()
	}
	pl.aim(v, 0)
	c.mu.Lock()
	c.placements[id] = pl
	c.busy[id] = true
	if replaces != nil {
		replaces.ReplacedBy = id
	}
	c.mu.Unlock()
	// The decision and its candidates are on disk before the first place.
	if err := c.persist(); err != nil {
		c.mu.Lock()
		delete(c.placements, id)
		delete(c.busy, id)
		if replaces != nil {
			replaces.ReplacedBy = ""
		}
		c.mu.Unlock()
		c.met.placements.WithLabelValues(outError).Inc()
		return rep, err
	}
	rep.Attempts, err = c.dispatch(ctx, p, o, pl, timeout)
	c.mu.Lock()
	delete(c.busy, id)
	// A tick that listed the node before the place landed would find the
	// instance missing though its node is up, and place it again under
	// another decision: it leaves pl alone, as after a start or stop.
	c.ops.verbDoneLocked(pl)
	switch pl.Life {
	case LifePlaced:
		cp := *pl
		rep.Placed = &cp
	case LifeUnsettled:
		rep.Unsettled = true
	}
	c.mu.Unlock()
	return rep, err
}

// transition moves pl to life and chains it.
func (c *writer) transition(pl *Placement, to Lifecycle, reason string) error {
	c.mu.Lock()
	from := pl.Life
	pl.Life = to
	switch to {
	case LifeLost:
		pl.LostReason = reason
	case LifePlaced:
		pl.LostReason = ""
	}
	rec := lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node, Workload: pl.Workload,
		From: string(from), To: string(to), Reason: reason}
	c.mu.Unlock()
	_, err := c.appendChain(KindLifecycle, rec)
	return err
}

// forget removes pl and chains why.
func (c *writer) forget(pl *Placement, reason string) error {
	c.mu.Lock()
	delete(c.placements, pl.DecisionID)
	rec := lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node, Workload: pl.Workload,
		From: string(pl.Life), To: "unloaded", Reason: reason}
	c.mu.Unlock()
	_, err := c.appendChain(KindLifecycle, rec)
	return err
}

// alert chains an alert for pl when the reason is new.
func (c *writer) alert(pl *Placement, reason string) (isNew bool, err error) {
	c.mu.Lock()
	if pl.LastError == reason {
		c.mu.Unlock()
		return false, nil
	}
	pl.LastError = reason
	rec := lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node, Workload: pl.Workload, Reason: reason}
	c.mu.Unlock()
	_, err = c.appendChain(KindAlert, rec)
	return true, err
}

// replaced finishes a successful reschedule: the new placement is
// persisted already; now the old one is marked rescheduled (its copy is
// unloaded at once if its node answers with it, else when it returns) or
// forgotten (its node answered without it, or the new instance is the
// same one).
func (c *writer) replaced(ctx context.Context, old, nu *Placement) error {
	now := c.now()
	nv := c.rec.nodeOf(old.Node, now)
	c.mu.Lock()
	old.ReplacedBy = nu.DecisionID
	old.Attempts, old.NextAttempt = 0, time.Time{}
	rec := migrateRecord{Workload: old.Workload, FromNode: old.Node, FromInstance: old.InstanceID,
		ToNode: nu.Node, ToInstance: nu.InstanceID, DecisionID: nu.DecisionID, Reason: "node_dead"}
	c.mu.Unlock()
	c.met.reschedule.WithLabelValues(outPlaced).Inc()
	var err error
	present := false
	if nv.alive && nv.status != nil {
		_, present = findInstance(nv.status, old.InstanceID)
	}
	switch {
	case old.Node == nu.Node && old.InstanceID == nu.InstanceID:
		// The node names instances after the workload: the new one is the
		// old one; there is nothing to unload.
		rec.Reason = "instance_lost"
		err = c.forget(old, "replaced by the same instance on "+nu.Node)
	case nv.alive && nv.status != nil && !present:
		rec.Reason = "instance_lost"
		err = c.forget(old, "replaced after loss on "+nu.Node)
	default:
		err = c.transition(old, LifeRescheduled, "replaced on "+nu.Node)
	}
	_, cerr := c.appendChain(KindMigrate, rec)
	err = errors.Join(err, cerr, c.persist())
	if present && old.Life == LifeRescheduled {
		// Its node answers with the old copy: unload it now rather than
		// run two copies until the next tick.
		err = errors.Join(err, c.life.orphanUnload(ctx, old, c.now()))
	}
	return err
}

// updateGauges sets the liveness and unsettled gauges.
func (c *writer) updateGauges() {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := map[engine.Liveness]int{}
	for _, n := range c.nodes {
		counts[n.liveness(now, c.conf().DeadAfter)]++
	}
	unsettled := 0
	for _, p := range c.placements {
		if p.Life == LifeUnsettled {
			unsettled++
		}
	}
	for _, l := range []engine.Liveness{engine.Alive, engine.Suspect, engine.Dead} {
		c.met.nodes.WithLabelValues(l.String()).Set(float64(counts[l]))
	}
	c.met.unsettled.Set(float64(unsettled))
	c.met.capped.Set(float64(c.rec.cappedLocked()))
}

// chainRefusal chains the refusal of a package (err) for phase.
func (c *writer) chainRefusal(phase, workload, pkgID, version, dir string, err error, attempt int) error {
	rec := refuseRecord{Phase: phase, Workload: workload, Package: pkgID, Version: version, Dir: dir,
		Reason: err.Error(), Revoked: revokedSubject(err), Attempt: attempt}
	if attempt > 0 {
		rec.Next = "retry with backoff"
	}
	_, cerr := c.appendChain(KindRefuse, rec)
	return cerr
}

// retire marks pl retiring (its copy is unloaded when its node answers,
// then it is forgotten) and chains why; cause, when it names a revoked
// subject, is chained with it.
func (c *writer) retire(pl *Placement, why string, cause error) error {
	c.mu.Lock()
	rec := c.retireLocked(pl, why)
	c.mu.Unlock()
	return c.chainRetired(rec, cause)
}

// retireLocked is retire's state change; the caller holds mu and chains
// the record.
func (c *writer) retireLocked(pl *Placement, why string) lifecycleRecord {
	rec := lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node, Workload: pl.Workload,
		From: string(pl.Life), To: string(LifeRetiring), Reason: why}
	pl.Life, pl.RetireReason = LifeRetiring, why
	pl.Attempts, pl.NextAttempt, pl.LastError = 0, time.Time{}, ""
	if pl.Supersedes != "" {
		pl.Supersedes = ""
	}
	return rec
}

func (c *writer) chainRetired(rec lifecycleRecord, cause error) error {
	rec.Revoked = revokedSubject(cause)
	_, err := c.appendChain(KindLifecycle, rec)
	return err
}

// declFailed records a failed attempt to place w: backoff doubling to
// MaxBackoff, the failure chained only when its reason changes.
func (c *writer) declFailed(w Workload, version, why string, cause error) error {
	now := c.now()
	c.mu.Lock()
	st := c.decls[w.Name]
	if st == nil {
		st = &declState{Name: w.Name}
		c.decls[w.Name] = st
	}
	st.Attempts++
	st.NextAttempt = now.Add(backoff(c.conf().RetryBackoff, st.Attempts))
	isNew := st.LastError != why
	if isNew {
		st.Since = now
	}
	st.LastError = why
	attempt, next := st.Attempts, st.NextAttempt
	c.mu.Unlock()
	if !isNew {
		return nil
	}
	c.logDeclFailed(w, version, why, attempt, next)
	rec := refuseRecord{Phase: "declared", Workload: w.Name, Package: w.Package, Version: version, Reason: why,
		Revoked: revokedSubject(cause), Attempt: attempt, Next: "retry with backoff"}
	_, err := c.appendChain(KindRefuse, rec)
	return err
}

// declOK clears the backoff of workload name after a success.
func (c *writer) declOK(name string) {
	c.mu.Lock()
	was := ""
	if st := c.decls[name]; st != nil {
		was = st.LastError
		st.Attempts, st.NextAttempt, st.LastError, st.Since = 0, time.Time{}, "", time.Time{}
	}
	c.mu.Unlock()
	if was != "" {
		c.logDeclPlaced(name, was)
	}
}
