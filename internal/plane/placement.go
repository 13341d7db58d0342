package plane

import (
	"crypto/ed25519"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
)

// Target is a node the controller may place on: its id, its pinned key
// (facts signed by any other key are refused), the tier the operator
// assigned (never taken from facts), and whether it is this node's own
// host.
type Target struct {
	ID   string
	Key  ed25519.PublicKey
	Tier engine.Trust
	Self bool
}

// Lifecycle is where a placement is in the controller's view.
type Lifecycle string

// Lifecycles of a placement.
const (
	// LifeDispatching: the decision is persisted and a place call to
	// Node may be under way. Restored from the state file, it is treated
	// as unsettled: the node may have acted.
	LifeDispatching Lifecycle = "dispatching"
	// LifeUnsettled: a place to Node went without a valid answer and
	// could not be reconciled yet; nothing else is sent for this decision
	// until Node says whether it holds the instance.
	LifeUnsettled Lifecycle = "unsettled"
	// LifePlaced: the instance is on Node; HostState mirrors what Node
	// reports (loaded, running, unhealthy, ...).
	LifePlaced Lifecycle = "placed"
	// LifeLost: Node is dead (or answers without a live instance); the
	// instance is to be rescheduled, or rejoins if Node comes back with it.
	LifeLost Lifecycle = "lost"
	// LifeRescheduled: replaced elsewhere; the copy on Node is unloaded
	// (orphan unload) when Node answers again.
	LifeRescheduled Lifecycle = "rescheduled"
	// LifeRetiring: no longer wanted (its declared workload or replica
	// is gone, a newer version took over, its package is revoked); the
	// copy on Node is unloaded when Node answers (RetireReason says why),
	// then the placement is forgotten.
	LifeRetiring Lifecycle = "retiring"
)

// Order is what an operator asks to place; it is persisted with each
// placement so that a lost instance can be placed again after a restart.
type Order struct {
	// Name names the workload; empty means the package id.
	Name string `json:"name"`
	// PackageDir is the package directory (verified on each use).
	PackageDir string `json:"package_dir"`
	// Kept is the copy of the package placed in the controller's
	// placed-package store (Deps.Placed), which a failover or a start
	// reads rather than PackageDir; empty when none was kept.
	Kept string `json:"kept,omitempty"`
	// Config is the instance config sent with place.
	Config ctl.InstanceConfig `json:"config,omitzero"`
	// Start asks the host to start the instance once loaded.
	Start bool `json:"start"`
	// Pin, Prefer and Avoid are the operator's placement hints.
	Pin    string   `json:"pin,omitempty"`
	Prefer []string `json:"prefer,omitempty"`
	Avoid  []string `json:"avoid,omitempty"`
	// AllowEmulated is the operator's opt-in to emulated variants.
	AllowEmulated bool `json:"allow_emulated,omitempty"`
	// Variant, when set, is the only variant the engine may choose.
	Variant string `json:"variant,omitempty"`
	// DryRun decides, chains and explains, and dispatches nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// Candidate is one entry of a decision's ranked dispatch order.
type Candidate struct {
	Node    string `json:"node"`
	Variant string `json:"variant"`
}

// Placement is one placed (or being placed) instance, as the controller
// knows it. Its ID is the decision id that made it. Its slices and its
// Order are replaced, never changed in place: persist shares them with
// its snapshot, and its encoding cache compares the Order by pointer.
type Placement struct {
	// DecisionID is the hash of the chained decision (the placement id).
	DecisionID string `json:"decision_id"`
	Kind       string `json:"kind"`
	Workload   string `json:"workload"`
	Package    string `json:"package"`
	Version    string `json:"version"`
	// ManifestHash is the hash of the manifest bytes placed.
	ManifestHash string `json:"manifest_hash"`
	// Candidates is the decision's ranked dispatch order; Cursor indexes
	// the candidate being (or last) tried.
	Candidates []Candidate `json:"candidates"`
	Cursor     int         `json:"cursor"`
	// Node, Variant and InstanceID name the instance; InstanceID is known
	// before the place is sent (ctl.InstanceID).
	Node       string `json:"node"`
	Variant    string `json:"variant"`
	InstanceID string `json:"instance_id"`
	// Reserved is the memory the variant reserves on Node, counted as
	// pending there while the place is unanswered.
	Reserved Reservation `json:"reserved"`
	// PlacedAt is when the controller learnt the instance was placed;
	// until facts issued later arrive, its memory counts as pending.
	PlacedAt time.Time `json:"placed_at,omitzero"`
	// Life is the controller's lifecycle; HostState mirrors the node's.
	Life      Lifecycle `json:"life"`
	HostState string    `json:"host_state,omitempty"`
	// Order is the order the placement came from (nil for an instance the
	// controller adopted without one).
	Order *Order `json:"order,omitempty"`
	// Moves are when this workload moved (was placed again on another
	// node than the one it was lost on), oldest first; only the moves
	// within Config.RescheduleWindow of the latest are kept. A restart on
	// the same node is not a move.
	Moves []time.Time `json:"moves,omitempty"`
	// Capped is set while a lost instance is not placed again because it
	// moved MaxReschedules times within RescheduleWindow; it is cleared
	// when a move leaves the window, and by the operator's Start.
	Capped bool `json:"capped,omitempty"`
	// Attempts counts failed reschedule (or orphan unload) attempts since
	// the last success; NextAttempt is when the next may be made.
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	// LastError is the last failure reason; an alert is chained only
	// when it changes.
	LastError string `json:"last_error,omitempty"`
	// WasRunning records whether the instance was live when it was lost.
	WasRunning bool `json:"was_running,omitempty"`
	// LostReason says why the instance was lost (its node is dead, is no
	// longer a target, or answers without it); kept once it is replaced,
	// cleared when it rejoins.
	LostReason string `json:"lost_reason,omitempty"`
	// ReplacedBy is the decision id of the placement replacing this one
	// (set while the replacement is dispatched, and after).
	ReplacedBy string `json:"replaced_by,omitempty"`
	// Replaces is the decision id of the placement this one replaces.
	Replaces string `json:"replaces,omitempty"`

	// Declared names the declared workload (Config.Workloads) this
	// placement keeps, and Replica which of its replicas; empty for an
	// operator's placement.
	Declared string `json:"declared,omitempty"`
	Replica  int    `json:"replica,omitempty"`
	// Supersedes is the decision id of the placement of an older (or
	// other) version this one replaces: it is retired once this one runs
	// healthy on its node, and cleared then.
	Supersedes string `json:"supersedes,omitempty"`
	// Labels and Excludes are the package's co-residency labels, so the
	// engine sees what this instance is when it places its neighbours.
	Labels   []string `json:"labels,omitempty"`
	Excludes []string `json:"excludes,omitempty"`
	// Stopped is set when the operator stopped the instance through the
	// controller (Stop); it is cleared when the node reports it live again.
	Stopped bool `json:"stopped,omitempty"`
	// RetireReason says why a retiring placement is unloaded.
	RetireReason string `json:"retire_reason,omitempty"`
	// FailedSince is when the controller found the instance failed on
	// its node (its supervisor gave up) and began to start it again
	// (failed.go); zero once it has run again past its backoff.
	FailedSince time.Time `json:"failed_since,omitzero"`
	// OnDemand is, for a placed instance of an on-demand workload, its
	// state as Placements reads it now (starting, ready or idle:
	// ondemand.go); derived, never persisted.
	OnDemand string `json:"on_demand,omitempty"`
}

// live reports whether the host state is one where the instance serves.
func live(hostState string) bool {
	switch hostState {
	case ctl.StateRunning, ctl.StateUnhealthy, ctl.StateRestarting:
		return true
	}
	return false
}

// Reservation is memory an instance reserves on its node, in bytes.
type Reservation struct {
	HostBytes  uint64 `json:"host_bytes"`
	AccelBytes uint64 `json:"accel_bytes"`
}

func (r Reservation) engine() engine.Resources {
	return engine.Resources{HostBytes: r.HostBytes, AccelBytes: r.AccelBytes}
}
