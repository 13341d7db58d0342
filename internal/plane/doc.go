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
//     A node whose describe shows its workload host disabled, or no
//     workload host (Description.Host), is gate-denied, with that reason
//     in the explanation: it is alive, its instances are watched and
//     torn down, but nothing is placed on it until its host is enabled.
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
//     silent for DeadAfter (or reported stopped by the mesh: PeerStopped)
//     lost, reschedules them avoiding the dead node with a doubling
//     backoff (failed attempts never stop; moves, placements on another
//     node than the one the workload was lost on, are capped by
//     MaxReschedules within RescheduleWindow: past it a lost instance of
//     a dead node stays put, Capped, with an alert and a warn log, until a
//     move leaves the window or the operator's Start clears it; a restart
//     on the same node is no move), unloads a replaced copy when its node
//     returns (orphan unload), and takes back an instance whose node
//     returns with it (rejoin). A node that becomes alive, or a new
//     target, ends every reschedule's and declaration's backoff at the
//     next tick (moves.go). An instance its host reports failed (its
//     supervisor gave up), of a declared workload or an operator's
//     placement, is started again through its node, chained first, with
//     the reschedule backoff and never given up (failed.go).
//   - An operator placement keeps its package (Deps.Placed, kept.go):
//     Place copies what it verified into the placed-package store and
//     places that copy; a failover, a resumed decision and a start read
//     it (Order.Kept), and a package is only ever placed for a placement
//     when its manifest hash is the one placed (ErrPackageChanged). Kept
//     packages no placement uses are pruned every tick.
//   - Declared workloads (Config.Workloads) are reconciled every tick
//     after the lifecycle steps: their packages come from the Store (a
//     pinned version, else the newest by semantic version) and are
//     verified like any other; each keeps Replicas instances, one per
//     replica slot, on distinct nodes; the workload name goes into the
//     instance config, so two workloads of one package on one node get
//     distinct instance ids. Instances of a declaration that is gone, or
//     of a replica beyond the count, are retired (unloaded when their
//     node answers, then forgotten); operators' placements are never
//     touched. When the resolved package differs from what a replica
//     runs, one replica at a time is replaced: the new instance is placed
//     (preferring the old one's node) and the old one is retired only
//     once the new one's node reports it running; a new one that fails is
//     retired instead. A declaration that cannot be placed backs off like
//     a reschedule, and its failure is chained once per change of reason
//     (an unplaceable decision whose reason is unchanged is evaluated, not
//     chained again). Declarations (declview.go) lists each declared
//     workload with its state (placed, pending, unplaceable), its last
//     reason and since when; the gauge nodeld_plane_declarations{state}
//     counts them, and each change of reason is logged once at warn.
//   - Governance (governance.go): when the policy, not the engine, placed
//     nothing (a kind not admitted: no trust floor is made up for it; or
//     every node considered, the pin alone when pinned, denied by
//     deny_nodes or deny_labels), Report.Governance has the policy's
//     reason and a declaration's reason starts "governance:".
//   - A decision's explanation adds notes (explainnotes.go, chained with
//     the decision): prefer and avoid, which of them chose, the measured
//     figure behind each perf score, and the tie-break rule.
//   - Revocation (reference 4.8): a package the dispatcher refuses as
//     revoked (package, signer or artifact) is not placed; the refusal is
//     chained with the revoked subject (operator places and declarations
//     alike; declarations back off). The operator's start of a placed
//     instance (Start) is refused, and chained (phase start), when the
//     controller's revocation list (Deps.Revocations) revokes its package
//     id or manifest hash, or its package directory verifies as revoked;
//     stop and unload stay possible. A lost instance whose package is
//     revoked is retired, not rescheduled; an instance its host tore down
//     for revocation (departed "revoked") is forgotten. The signed notices
//     themselves are the dispatcher's (its revoke verb with notify).
//   - Placements keep their package's labels and excludes, so the engine's
//     co-residency constraint sees placed instances; upgrades, and
//     reschedules of sticky packages, set the engine's CurrentNode.
//   - The operator's Start, Stop and Unload (reference 3.5.2) name a
//     placement by instance or decision id and go through it: a stopped
//     instance is not placed again when its node dies, one started again
//     is running under its host's supervision as far as the lifecycle
//     knows (watched, and moved when its node dies), an unloaded one is
//     forgotten (a declaration places its replica anew). Start is refused
//     on a node whose tier no longer admits the kind (it runs the
//     workload there again).
//   - Every decision record carries what its explanation needs (the
//     engine's candidates with scores and rejections, bounded by
//     MaxChainedCandidates); ScanDecisions rebuilds the explanation of a
//     decision from the chain file, in one read, once Recent no longer
//     has it. The request is chained
//     first; a teardown is never blocked by governance, and a node whose
//     tier no longer admits the kind is waived with the waiver chained.
//   - The state file (controller.json, 0600, versioned, atomic) holds the
//     placements with their orders, lifecycles, backoffs and unsettled
//     decisions, and the declarations' backoffs; a malformed one is
//     refused and left untouched. Version 2 lists each package placed
//     once and keeps a decision's ranked candidates only until it is
//     settled (the chained decision keeps them for good), about 330
//     bytes a placed instance; version 1 files load and are rewritten as
//     version 2 at the next change. Every change rewrites the whole file
//     (encoded outside mu, each placement's encoding reused while the
//     placement is unchanged: its fields, slices and order are replaced,
//     never changed in place); a write that would change nothing is
//     skipped.
//
// # Invariants
//
//   - Never two instances of one workload on one node, but for an
//     upgrade's new instance beside the one it supersedes (their ids
//     differ by version): nodes holding (or being given, or unloading) an
//     instance of the same kind and name are gate-denied to the engine,
//     other than the placement the new one takes over from; a decision
//     resumed down its candidates skips one that has since got such an
//     instance. A declared replica is held by
//     one placement at a time (a reschedule's or an upgrade's pair
//     counting as one).
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
// Recent, RecentIDs and NodeViews (operator.go) are what the operator
// surface reads: the reports of the latest MaxRecentReports decisions of
// this run, kept by place, and each target's view.
// New starts nothing. ApplyConfig swaps the config atomically.
//
// # Not yet done
//
//   - Lease-stopped restarts.
//   - Revocations the controller's list does not hold (a host tore an
//     instance down for a notice the controller has not applied) are not
//     remembered: a declaration whose replica was torn down is placed
//     again, and the hosts refuse it (dispatch exhausted, backoff).
//   - A declaration unloaded by the operator is placed again by the next
//     reconciliation; there is no "suspended" declaration.
//   - convert.go reads the facts' capability records and the manifests'
//     requirements, routes, labels, excludes, perf target and sticky
//     flag. Still missing: latency class (Interactive) is not derived; capability ids may repeat within a node (mem.vram per
//     GPU, identical GPUs) while the engine names assignments by id;
//     facts signed before capability records existed get the old
//     derivation, without mem.unified for Apple silicon.
//   - Placements on a node that is no longer a target (dropped by
//     SetTargets, or named by a restored placement but not configured)
//     are lost once DeadAfter has passed since its last contact (the
//     controller's start for a restored one) and move, with LostReason
//     saying so; but the copies of replaced or retiring placements there
//     are never unloaded, as the node cannot be reached, and stay listed
//     until it is a target again. An unsettled decision whose node never
//     answers again stays unsettled (nothing else is placed for it); a
//     lost declared replica that may not be rescheduled (pinned, not
//     running, capped) keeps its slot. A failed instance is only started
//     again on its node (placed elsewhere only once its node no longer
//     has it).
//   - The acceptance lists' tests run on the in-memory fake cluster here
//     and, end to end, in cmd/nodeld's controller tests; there is no
//     harness of in-process nodes over QUIC with a fake clock (meshtest)
//     running each acceptance item as its own test yet.
//   - The fake cluster of the tests lives in the package's _test files,
//     not yet in a planetest package.
package plane
