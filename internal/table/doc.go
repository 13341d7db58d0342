// Package table is the placement table: for each inference role, which
// instance serves it right now, an instance on this host (loopback HTTP) or
// an admitted peer (the mesh). The proxy resolves a role on every request;
// the serving side of the mesh asks what a peer may reach.
//
// A Table is made of parts with one job each, whose methods it promotes:
// locals (this node's registrations, LocalSlots, and their election),
// adverts (peers' infer.<role> and workload-host advertisements and the
// wait for a restarted peer's link), standbys (controllers' demand:<role>
// offers, standby.go), policy (exposure, serve_to, use_from) and core
// (the lock, generation, subscribers, audit). Table
// itself does what needs several: Resolve*, LocalForPeer*, this node's
// Advertisements, IngestAdvertisement, ApplyPeerEvent and Snapshot.
//
// # Invariants
//
//   - Only loopback endpoints are registered locally; LocalForPeer never
//     returns a remote target, so a request cannot bounce between nodes.
//   - Default deny both ways (use_from; expose and serve_to). An
//     advertisement is taken only as its admitted, allowed sender's own;
//     admission is re-checked on every resolution.
//   - Freshness is counted from local receipt, never the peer's clock.
//   - A LocalSlot changes only through its holder; exactly one of a role's
//     registrations is elected (placed before adopted, then the oldest). A
//     Hold lets a stopping holder wait until its requests are done.
//   - Resolution is deterministic: local first, then a live link before one
//     waiting after a restart, healthy, lowest load, node id. The
//     generation counts every resolution-relevant change.
//
// # Concurrency
//
// A Table is safe for concurrent use. One RWMutex (core's) guards every
// part, so Resolve reads them all under one read lock; it is never held
// while calling the Auditor, Options.RecordRefusal, the Admission or
// Options.Load, or while waking subscribers (a non-blocking, coalescing
// send). The package starts no goroutine.
//
// The long story is docs/internals.md "internal/table"; a request's path
// through it is docs/architecture.md section 3.
package table
