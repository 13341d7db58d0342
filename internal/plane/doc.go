// Package plane is the controller: it learns the nodes it may place on from
// their signed facts, asks the pure placement engine (internal/engine)
// where a workload goes, chains every decision, sends the place down the
// ranked candidates through a Dispatcher, watches what it placed, moves
// what a dead node held, and reconciles the declared workloads (an
// on-demand one only while demanded, unloaded when idle: ondemand.go).
// Targets and their trust tiers come from the operator, never from a
// node's claim.
//
// # Invariants
//
//   - Never two instances of one placement: a decision is chained (its
//     entry hash is its id) and persisted, with the candidate being tried,
//     before each place is sent; an unanswered place is settled with that
//     node before anything is placed elsewhere; a replacement is persisted
//     before the placement it replaces changes.
//   - Never two instances of one workload on one node (but an upgrade's
//     new instance beside the one it supersedes); a declared replica is
//     held by one placement at a time.
//   - A node that answers is never dead. A decision that cannot be chained
//     is not taken; a placement that cannot be saved (Deps.State: with a
//     replicated store, committed by a majority) is not dispatched.
//     Governance is default deny; a teardown is never blocked by it.
//   - The state file is written whole and atomically; a malformed one is
//     refused, untouched. Only the leader (Deps.Leadership) ticks, places
//     and dispatches. Time comes from Deps.Now; the reconciler does no I/O.
//
// # Concurrency
//
// Controller is safe for concurrent use; its parts (reconciler, writer,
// lifecycle, readModel, operatorVerbs, keeper: controller.go) share one
// core whose mu guards the state and is never held across I/O. Ticks are
// serialised (lifecycle.tickMu, held across a tick's calls); Place runs
// beside them, and a placement being dispatched is left alone by the
// lifecycle until its call returns. writer.persistMu serialises state
// writes. New starts nothing; Run owns the ticker and puts what
// Reconfigure (a reload, Refresh) hands over in force between ticks.
//
// The long story is docs/internals.md "internal/plane" (and
// "internal/ctlraft"); the daemon's side, docs/architecture.md section 9.
package plane
