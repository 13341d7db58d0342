// Package plane is the controller loop (docs/architecture.md; a Go
// rendering of the original implementation's controller): it learns the nodes
// it may place on from their signed facts, asks the pure placement engine
// (internal/engine) where a workload goes, chains every decision, sends
// the place down the ranked candidates, watches what it placed, and moves
// what a dead node held.
//
// # Job
//
//   - Targets are given by the operator (Target: id, pinned key, tier,
//     self). Each tick describes every target; facts verify against the
//     pinned key and are cached under the seq and TTL rules the
//     original used. The tier the engine sees is always the operator's, never one a
//     node claims.
//   - Place runs governance (default deny: a kind absent from
//     Policy.Kinds goes nowhere; its MinTier is the engine's trust floor;
//     deny_nodes and deny_labels are gate verdicts), the engine, chains
//     the decision (the entry hash is the decision id, for dry runs and
//     unplaceable decisions too), persists the placement with its ranked
//     candidates, and only then dispatches: Refused and Unreachable fall
//     through to the next candidate; Indeterminate is reconciled with that
//     node (status) first, and a decision it cannot settle stops
//     dispatching and is settled on a later tick.
//   - Tick mirrors the hosts' instance states, marks instances of nodes
//     silent for DeadAfter lost, reschedules them avoiding the dead node
//     with a doubling backoff (failed attempts never stop; successful moves
//     are capped by MaxReschedules, then the instance stays put with an
//     alert), unloads a replaced copy when its node returns (orphan
//     unload), and takes back an instance whose node returns with it
//     (rejoin).
//   - The state file (controller.json, 0600, versioned, atomic) holds the
//     placements with their orders, lifecycles, backoffs and unsettled
//     decisions; a malformed one is refused and left untouched.
//
// # Invariants
//
//   - Never two instances of one placement: a decision is persisted
//     (with the candidate being tried) before each place is sent; a place
//     without a valid answer is never followed by a place elsewhere until
//     the node has said it does not hold the instance; a replacement is
//     persisted before the placement it replaces changes.
//   - A node that answers is never dead. A decision that cannot be
//     chained is not taken; a placement that cannot be persisted is not
//     dispatched.
//   - All time comes from Deps.Now.
//
// # Concurrency
//
// A *Controller is safe for concurrent use. Ticks are serialised (tickMu,
// held across a tick's calls on purpose); Place runs beside them and
// beside other Places, so a long place never holds up the lifecycle. A
// placement being dispatched is marked busy and left alone by the
// lifecycle until its call returns. mu guards the in-memory state and is
// never held across I/O; persistMu serialises the state file writes.
// Tick describes the targets on goroutines it waits for before it
// returns. Run owns the ticker loop and returns nil when its ctx ends.
// New starts nothing. ApplyConfig swaps the config atomically.
//
// # Not yet done
//
//   - Revocation (reference 4.8), the operator's instance verbs (3.5.2;
//     Dispatcher.Stop is declared for them), lease-stopped restarts,
//     declared workloads (controller.workloads) and replicas.
//   - The wiring in cmd/nodeld (an adapter from internal/dispatch to
//     Dispatcher: describe plus a status listing for Describe, the
//     VerifiedPackage as Package, "self" for the Self target) and the ctl
//     verbs.
//   - convert.go reads the facts' capability records and the manifests'
//     requirements, routes, labels, excludes, perf target and sticky
//     flag. Still missing: placed instances reach the engine without
//     their package's labels and excludes (Placement does not keep
//     them), so co-residency never rejects a node yet;
//     Request.CurrentNode is never set, so Sticky has no effect yet;
//     latency class (Interactive) is not derived; capability ids may repeat within a node (mem.vram per
//     GPU, identical GPUs) while the engine names assignments by id;
//     facts signed before capability records existed get the old
//     derivation, without mem.unified for Apple silicon.
//   - Placements on a node that is no longer a target are kept and left
//     alone; an unsettled decision whose node never answers again stays
//     unsettled (nothing else is placed for it).
//   - The fake cluster of the tests lives in the package's _test files,
//     not yet in a planetest package.
package plane
