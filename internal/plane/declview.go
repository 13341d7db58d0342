package plane

// This file is what an operator sees of the declared workloads: each
// declaration's state and last reason (Declarations, nodeld ctl
// workloads), the nodeld_plane_declarations gauge, and the warn line
// logged once per change of reason.

import (
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Declaration states, as Declarations, the gauge and the operator read
// them.
const (
	// DeclPlaced: every replica has an instance placed.
	DeclPlaced = "placed"
	// DeclPending: a replica is being placed, or is missing and has not
	// been tried yet (the next tick tries it); no failure is recorded.
	DeclPending = "pending"
	// DeclUnplaceable: the last attempt to place a replica failed
	// (Reason says why); it is tried again after a backoff.
	DeclUnplaceable = "unplaceable"
)

// declStates are the states in the order the gauge and status list them.
var declStates = []string{DeclPlaced, DeclPending, DeclUnplaceable}

// DeclarationView is one declared workload as an operator reads it.
type DeclarationView struct {
	Name     string
	Package  string
	Version  string // the pinned version, "" for the newest
	Replicas int
	// Placed counts the replicas with an instance placed (running as far
	// as the controller knows, or lost and not yet moved).
	Placed int
	State  string
	// Reason is the last failure, "" unless State is DeclUnplaceable.
	Reason string
	// Since is when Reason was first given (the attempt that changed it);
	// zero when there is no reason.
	Since time.Time
	// Attempts counts the failed attempts since the last success;
	// NextAttempt is when the next may be made.
	Attempts    int
	NextAttempt time.Time
	// OnDemand is an on-demand workload's state (cold, starting, ready,
	// idle: ondemand.go); "" for a workload placed all the time. Its
	// Replicas are then the instances wanted now (demanded), not the
	// declared maximum.
	OnDemand string
}

// Declarations returns every declared workload with its state and last
// reason, by name.
func (c *readModel) Declarations() []DeclarationView {
	ws := c.conf().Workloads
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]DeclarationView, 0, len(ws))
	for _, w := range ws {
		v := c.declViewLocked(w)
		if w.OnDemand != nil {
			v.OnDemand = c.onDemandStateLocked(w, now)
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b DeclarationView) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// declViewLocked is w's view; the caller holds mu.
func (c *readModel) declViewLocked(w Workload) DeclarationView {
	n := wantedLocked(w, c.decls[w.Name])
	v := DeclarationView{Name: w.Name, Package: w.Package, Version: w.Version, Replicas: n}
	placed := make([]bool, n)
	moving := false
	for _, p := range c.placements {
		if p.Declared != w.Name || p.Replica >= n {
			continue
		}
		switch p.Life {
		case LifePlaced, LifeLost:
			placed[p.Replica] = true
		case LifeDispatching, LifeUnsettled:
			moving = true
		}
	}
	for _, ok := range placed {
		if ok {
			v.Placed++
		}
	}
	st := c.decls[w.Name]
	switch {
	case st != nil && st.LastError != "":
		v.State, v.Reason, v.Since = DeclUnplaceable, st.LastError, st.Since
		v.Attempts, v.NextAttempt = st.Attempts, st.NextAttempt
	case v.Placed == n && !moving:
		v.State = DeclPlaced
	default:
		v.State = DeclPending
	}
	return v
}

// updateDeclGauge sets nodeld_plane_declarations from the declarations
// in force.
func (c *writer) updateDeclGauge() {
	counts := map[string]int{}
	for _, d := range c.read.Declarations() {
		counts[d.State]++
	}
	for _, s := range declStates {
		c.met.declarations.WithLabelValues(s).Set(float64(counts[s]))
	}
}

// logDeclFailed logs, at warn, a declared workload that could not be
// placed for a new reason (declFailed calls it once per change of
// reason, not per attempt).
func (c *writer) logDeclFailed(w Workload, version, why string, attempt int, next time.Time) {
	c.log.Warn("declared workload not placed",
		zap.String("workload", w.Name), zap.String("package", w.Package), zap.String("version", version),
		zap.String("reason", why), zap.Int("attempt", attempt), zap.Time("next_attempt", next))
}

// logDeclPlaced logs, at info, a declared workload placed again after a
// failure that was logged.
func (c *writer) logDeclPlaced(name, was string) {
	c.log.Info("declared workload placed after failures", zap.String("workload", name), zap.String("last_reason", was))
}
