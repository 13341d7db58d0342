// Package table is the placement table: for each inference role, which
// instance serves it right now, an instance on this host (reached over
// loopback HTTP) or an admitted peer node (reached over the mesh).
//
// Local instances are registered by whoever runs or probes them (the host's
// supervision, through SyncLocal and a Probe); remote ones come from the
// infer.<role> advertisements of peers, handed over by the mesh with the
// sender id it verified (IngestAdvertisement). The proxy resolves a role on
// every request (Resolve), and the serving side of the mesh asks what a
// peer may reach (LocalForPeer).
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
//     sender is allowed for the role. Refusals are audited.
//   - Freshness is measured from local receipt (Options.Now) against the
//     TTL; the peer's timestamp is never trusted. A repeat refreshes the
//     TTL. Expired entries are kept but never resolve.
//   - Admission is re-checked on every resolution, so a revoked peer stops
//     resolving at once, before its entry is removed.
//   - Resolution prefers the local instance (warm KV cache), then the best
//     remote candidate: healthy first, lowest advertised load, ties by node
//     id ascending. The original took the first by node id; with equal
//     loads this is the same choice. Same table, same answer.
//   - LocalForPeer never returns a remote target, so a forwarded request
//     cannot bounce from node to node.
//   - The generation counts resolution-relevant changes (see the methods
//     for exactly which); a cache keyed on it is never stale.
//
// # Audit
//
// Every change of exposure or of either allowlist and every refused
// advertisement is recorded through Options.Audit with source AuditSource
// and the kinds KindMeshExpose, KindMeshAllow, KindRemoteAllow and
// KindAdvertRefused. Records are written after the change is applied; a
// failed record is counted (nodeld_table_audit_failures_total) and reported
// to Options.AuditError, never undone.
//
// # Concurrency
//
// A Table is safe for concurrent use. One RWMutex guards the state; it is
// never held while calling the Auditor, the Admission, Options.Load or
// while waking subscribers, so those may call back into the table.
// Subscribers (Subscribe) are woken after every change with a non-blocking,
// coalescing send. The package starts no goroutines.
package table
