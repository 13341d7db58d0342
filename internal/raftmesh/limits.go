package raftmesh

import "time"

// Bounds of the stream layer.
const (
	// DefaultAcceptQueue is how many inbound raft streams wait for raft's
	// Accept when Config.AcceptQueue is zero. Raft opens a few streams per
	// voter (its connection pool, raft.NetworkTransport's MaxPool, plus one
	// for pipelined replication) and its accept loop takes them at once: a
	// full queue means raft is stuck, and a further stream is refused
	// (CodeBusy) rather than held on a mesh stream goroutine.
	DefaultAcceptQueue = 16
	// MaxAcceptQueue caps Config.AcceptQueue.
	MaxAcceptQueue = 1024
	// MaxVoters caps the voter set: raft clusters are 3 or 5 voters; a
	// longer list is a configuration mistake.
	MaxVoters = 9
)

// The raft timing of LANConfig and NewTransport; the reasons are in
// LANConfig's doc.
const (
	HeartbeatTimeout   = 500 * time.Millisecond
	ElectionTimeout    = 500 * time.Millisecond
	LeaderLeaseTimeout = 500 * time.Millisecond
	CommitTimeout      = 50 * time.Millisecond
	// TransportTimeout bounds one raft RPC's I/O on a stream (raft scales
	// it up for snapshots) and a Dial.
	TransportTimeout = 5 * time.Second
	// TransportMaxPool is how many idle streams raft keeps per voter.
	TransportMaxPool = 3
	// SnapshotRetain is how many snapshots the file store keeps.
	SnapshotRetain = 2
)
