// Package ctlraft keeps the controller's state (internal/plane) in a
// hashicorp/raft log replicated between the controller voters over the
// mesh (internal/raftmesh). Store is plane's StateStore and Leadership:
// on the leader Save returns once the change is committed by a majority
// and applied; every voter's FSM holds the whole state, which plane
// reads back when it gains leadership and for a follower's reads. A
// single controller is a one-voter cluster whose state New reads from
// disk (solo.go). A controller.json found on first start is imported
// once, as one entry.
//
// # Invariants
//
//   - An entry is a delta (placements and packages by key, removals,
//     declarations, decision records), never the whole state but for a
//     Reset or the import; applying it is deterministic: no clock, no
//     random, no I/O, the FSM's memory only. A malformed entry changes
//     nothing on any voter (every voter refuses it the same way).
//   - Every decoder (entry, snapshot) bounds sizes and counts (limits.go)
//     before it allocates, and refuses unknown fields and trailing data.
//   - Snapshots (SnapshotThreshold, TrailingLogs) keep the log bounded.
//   - The state file is imported at most once per cluster (the FSM keeps
//     that it was) and renamed to ImportedSuffix after: never read again.
//
// # Concurrency
//
// Store is safe for concurrent use. New starts nothing; Run opens the
// stores, runs raft, follows its leadership on its own goroutine, and
// returns once ctx ends and raft has shut down (the stores closed). Save
// and Barrier wait for raft's future on a goroutine that ends when it
// resolves (at the latest at shutdown). The FSM's mu guards its maps;
// raft applies entries from one goroutine.
package ctlraft
