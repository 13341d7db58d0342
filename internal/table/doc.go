// Package table is the placement table: for each inference role, which
// instance serves it right now, an instance on this host (reached over
// loopback HTTP) or an admitted peer node (reached over the mesh).
//
// Local instances are registered by whoever runs or probes them: the host
// for the instances it places (OriginPlaced), the runner's Adopter for the
// servers it adopts (OriginAdopted), or any caller through SyncLocal and a
// Probe. Remote ones come from the infer.<role> advertisements of peers,
// handed over by the mesh with the sender id it verified
// (IngestAdvertisement). The proxy resolves a role on every request
// (Resolve), and the serving side of the mesh asks what a peer may reach
// (LocalForPeer).
//
// The same ingestion keeps each admitted peer's latest workload-host
// advertisement (HostAdvertName: its instance and in-flight counts,
// whether its host is enabled, its labels), one per peer, so a controller
// sees every node's load beside its routes (HostAdverts, and Snapshot's
// Hosts for status). It names no role and never resolves: it bumps no
// generation and wakes no subscriber.
//
// # Local registrations
//
// RegisterLocal returns a LocalSlot: the registration belongs to its
// holder, who alone updates it (LocalSlot.Update) and withdraws it
// (LocalSlot.Release). A role may have several registrations at once (an
// adopted server and a placed instance, or two placed instances); it is
// served locally while any remains, and exactly one, the elected, serves
// it. The election is deterministic: the lowest Origin first, so a placed
// instance before an adopted server, then the oldest registration. A placed
// instance serves first because it is what a controller decided to run
// here, with memory reserved and supervision behind it; the adopted server
// an operator configured stands by and takes over at once when no placed
// instance is up. Within one origin the oldest keeps the role, so a new
// registration never moves traffic off a warm instance. Releasing the
// elected registration elects the next one in the same step, so a survivor
// serves with no gap; releasing one never withdraws another's.
//
// # Draining a registration
//
// A forwarder that resolves with ResolveHeld (the proxy) or
// LocalForPeerHeld (the serving side of the mesh) takes a Hold of the
// elected registration in the same step, and gives it back (Hold.Done)
// when its exchange with the instance has ended. A registration's holder
// that stops its instance therefore releases the registration first (new
// requests go to the next registration or a peer at once), waits for
// LocalSlot.Drained (every hold of it done, bounded by its own grace), and
// only then stops the process: no request already sent to the instance,
// or resolved to it and not yet sent, meets a closed port. Resolve and
// LocalForPeer take no hold, for callers that do not forward.
//
// # Invariants
//
//   - Only loopback endpoints are registered locally: a base URL is exactly
//     http://<loopback IP or "localhost">:<port> (grammar.ParseLoopbackURL)
//     and is stored as http://<loopback IP>:<port>, so nothing registered
//     can make the proxy reach another machine. Role names, local or
//     advertised, are grammar Names (never a '/').
//   - Default deny on both sides. A remote node serves this node a role
//     only when listed in the role's use_from (AllowRemoteNode); this node
//     serves a peer only when the role is exposed (ExposeToMesh) and the
//     peer is listed in its serve_to (AllowMeshPeer). Allowing one role
//     never helps another.
//   - An advertisement is taken only when it is the sender's own
//     (ad.NodeID equals the verified sender), the sender is admitted and the
//     sender is allowed for the role (a workload-host advertisement has no
//     role and no allowlist, the rest holds). Refusals are recorded (see
//     Audit).
//   - Freshness is measured from local receipt (Options.Now) against the
//     TTL; the peer's timestamp is never trusted. A repeat refreshes the
//     TTL. Expired entries are kept but never resolve, and HostAdverts
//     leaves out expired workload-host advertisements and those of peers
//     no longer admitted. RemoveNode drops all of a peer's.
//   - A peer that restarted keeps its routes only while it waits for its
//     link (KeepForRestart, at most the mesh's restart wait, by
//     Options.Now): they rank after every live candidate, stop resolving
//     when the wait is over even if nobody removes them, count as live
//     again after Linked, and go with RemoveLinking (only while still
//     waiting) or RemoveNode. Snapshot shows them as waiting_for_link.
//   - Admission is re-checked on every resolution, so a revoked peer stops
//     resolving at once, before its entry is removed.
//   - A LocalSlot changes only through its holder; releasing it twice, or
//     a nil one, does nothing, and a released slot cannot be updated
//     (ErrReleased). Resolve, LocalBaseForRole, LocalForPeer,
//     Advertisement(s) and Snapshot's Local all read the elected
//     registration; Snapshot lists the others as Standby.
//   - Resolution prefers the local instance (warm KV cache), then the best
//     remote candidate: a node with a live link before one waiting for its
//     link after a restart (KeepForRestart), then healthy first, lowest
//     advertised load, ties by node id ascending. The original took the first by node id; with equal
//     loads this is the same choice. Same table, same answer.
//   - LocalForPeer never returns a remote target, so a forwarded request
//     cannot bounce from node to node.
//   - The generation counts resolution-relevant changes (see the methods
//     for exactly which); a cache keyed on it is never stale. For local
//     registrations that is a change of the elected base: registering,
//     updating or releasing a registration that stands by bumps nothing.
//
// # Audit
//
// Every change of exposure or of either allowlist is recorded through
// Options.Audit with source AuditSource and the kinds KindMeshExpose,
// KindMeshAllow and KindRemoteAllow: the operator's config or a pin
// causes them, so they are few. Every refused advertisement goes to
// Options.RecordRefusal instead, with the verified sender, the kind
// KindAdvertRefused and a Reason* constant: a peer decides how often it
// advertises (a peer listed in serve_to but missing from use_from is
// refused every advertisement interval, forever), so the daemon hands
// these to its shared rate-limited recorder, keyed by sender, kind and
// reason, which chains the first of a key and counts the rest. Records
// are written after the change is applied; a failed record is counted
// (nodeld_table_audit_failures_total) and reported to Options.AuditError,
// never undone. The table imports no other nodeld package, so the hook
// takes plain strings.
//
// # Concurrency
//
// A Table is safe for concurrent use. One RWMutex guards the state; it is
// never held while calling the Auditor, Options.RecordRefusal, the
// Admission, Options.Load or while waking subscribers, so those may call
// back into the table.
// Subscribers (Subscribe) are woken after every change with a non-blocking,
// coalescing send. The package starts no goroutines.
package table
