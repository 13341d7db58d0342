// Package raftmesh carries hashicorp/raft over the mesh: Layer is a
// raft.StreamLayer over mesh streams of kind KindRaft (a raft
// ServerAddress is a node id), LANConfig and NewTransport tune raft for
// voters on one LAN, OpenStores opens its BoltDB log and file snapshots,
// and NewHCLogger gives raft the daemon's zap logger; NoMesh stands in
// for the mesh of a node without one. internal/ctlraft runs the
// controller's replicated state on it (controller.voters).
//
// # Invariants
//
//   - Default deny: a raft stream is opened only to, and accepted only
//     from, a node in the voter set (the key the mesh link authenticated);
//     any other is refused (CodeNotVoter) and counted, never handed to
//     raft. SetVoters closes the streams of nodes it drops.
//   - Inbound streams wait for raft's Accept in a queue of AcceptQueue at
//     most; a stream that finds it full is refused (CodeBusy), so a stuck
//     raft never blocks the mesh's stream server.
//   - Raft's files are 0600 in a 0700 directory; looser ones are refused.
//   - No framing of its own: the bytes are raft's wire format, unchanged.
//
// # Concurrency
//
// Layer and Conn are safe for concurrent use; Conn.Close unblocks a Read
// or Write in another goroutine. The layer starts no goroutine: an
// accepted stream keeps the mesh's handler goroutine (ServeStream) until
// the stream closes, which holds the peer's stream credit as long as the
// stream lives. Close closes every stream handed out or queued, so that
// each of those goroutines, and raft's on them, returns.
package raftmesh
