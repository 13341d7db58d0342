// Package table is the placement table: for each inference role, which
// instance serves it right now, an instance on this host (reached over
// loopback HTTP) or an admitted peer node (reached over the mesh). Local
// registrations come from whoever runs them (the host, the runner's
// Adopter); remote routes come from peers' infer.<role> advertisements
// that the mesh hands over with the sender it verified. The proxy resolves
// a role on every request; the serving side of the mesh asks what a peer
// may reach. It also keeps each peer's latest workload-host advertisement,
// which resolves nothing.
//
// # Invariants
//
//   - Only loopback endpoints are registered locally; LocalForPeer never
//     returns a remote target, so a request cannot bounce between nodes.
//   - Default deny both ways: use_from for what a peer may serve this
//     node, expose and serve_to for what this node serves a peer. An
//     advertisement is taken only as its sender's own, from an admitted and
//     allowed sender; admission is re-checked on every resolution.
//   - Freshness is counted from local receipt, never the peer's clock.
//   - A LocalSlot changes only through its holder. Of several registrations
//     of a role exactly one is elected (placed before adopted, then the
//     oldest); releasing it elects the next in the same step. A forwarder's
//     Hold lets a stopping holder wait until its requests are done.
//   - Resolution is deterministic: local first, then a live link before one
//     waiting after a restart, healthy first, lowest load, node id. The
//     generation counts every resolution-relevant change.
//
// # Concurrency
//
// A Table is safe for concurrent use. One RWMutex guards the state; it is
// never held while calling the Auditor, Options.RecordRefusal, the
// Admission or Options.Load, or while waking subscribers, so those may call
// back in. Subscribers are woken with a non-blocking, coalescing send. The
// package starts no goroutine.
//
// The long story (local registrations, draining, each invariant in full,
// audit) is docs/internals.md "internal/table"; a request's path through
// it is docs/architecture.md section 3.
package table
