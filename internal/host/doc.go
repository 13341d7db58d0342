// Package host is the workload host: the node side of workload.ctl. It
// serves the eight methods on mesh streams of kind mesh.KindCtl (Register)
// and on the local operator socket (ServeLocal), fetches placed packages
// from the caller over mesh.KindArtifact streams, verifies them against
// this node's trust anchors and revocations, runs them through
// internal/runner and internal/sandbox, supervises them, registers their
// inference roles in the table while healthy, and applies and gossips
// signed revocation notices (mesh.KindNotice).
//
// # Invariants
//
//   - Only the files the signed manifest lists are written, through an
//     os.Root, each hashed before it is written; the directory must verify
//     (pkg.VerifyDir) before anything runs from it.
//   - A revoked subject refuses place and start and tears down what carries
//     it. place and start begin only once their begin record is chained
//     (fail closed); stop, unload and teardowns proceed and count a record
//     they could not write (nodeld_host_audit_failures_total).
//   - An instance holds its own table registration (table.OriginPlaced)
//     while running and releases only that one; a stop withdraws it before
//     touching the process and waits, up to its grace, for the requests
//     already resolved to it (table.LocalSlot.Drained).
//   - Any admitted peer may describe; status and logs only this node, its
//     controllers and its readers; the mutating verbs only its controllers,
//     none while the host is disabled, and none below the highest raft term
//     seen from the controller set (TermsFile, written before a call acts).
//
// # Concurrency
//
// New starts nothing. Calls are served on the mesh's stream goroutines (or
// ServeLocal's caller's). Run owns the revocation watcher and one
// supervisor goroutine per started instance; when ctx ends it stops every
// instance, waits for every supervisor and returns nil. Host wires parts
// with one job and one lock each (front, terms, lifecycle, registry,
// supervisors, roles, store, isolation, revoker, notices, readModel,
// journal); store.mu is taken before registry.mu; only notices.mu and
// terms.mu are held across I/O (a file write each).
//
// The long story (place, states, notices, fencing) is docs/internals.md
// "internal/host"; a ctl call's path is docs/architecture.md.
package host
