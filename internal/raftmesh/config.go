package raftmesh

import (
	"io"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"
)

// LANConfig is a raft configuration for voters on one LAN, for the node
// self (its ServerID is its node id), logging through z.
//
// raft's defaults (1 s heartbeat and election timeouts) are for WANs and
// busy hosts; on a LAN a mesh round trip is well under a millisecond, so
// the timeouts here are halved. After a leader dies a follower notices
// within HeartbeatTimeout to twice that (randomised): at most 1 s. It
// stands as candidate; a vote is granted once the other follower too has
// stopped hearing the leader (raft refuses votes while it knows one), and a
// split vote is retried after ElectionTimeout to twice that: at most 1 s a
// round. A new leader is thus usually there within 1 to 1.5 s and within
// 3 s even with one split vote (measured over 20 kills of
// TestThreeVotersElectApplyAndFailover on a shared 2-core host: median
// 1.04 s, max 1.63 s). Going lower buys little and makes a GC
// pause or a loaded 2-core host start needless elections.
// LeaderLeaseTimeout (a leader steps down when it has not reached a
// quorum for that long) may not exceed HeartbeatTimeout, and is equal to
// it: the lease plays no part in a failover's time (followers time out on
// HeartbeatTimeout), and at 250 ms a leader replicating a half-MiB entry
// stepped down needlessly in the test of it (under -race, on a loaded
// 2-core host: its followers answered after 280 to 470 ms).
// CommitTimeout is raft's default.
func LANConfig(self string, z *zap.Logger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(self)
	c.HeartbeatTimeout = HeartbeatTimeout
	c.ElectionTimeout = ElectionTimeout
	c.LeaderLeaseTimeout = LeaderLeaseTimeout
	c.CommitTimeout = CommitTimeout
	c.Logger = NewHCLogger(z, "raft")
	c.LogOutput = io.Discard
	return c
}

// NewTransport is raft's network transport over l: TransportMaxPool idle
// streams per voter, TransportTimeout per RPC.
func NewTransport(l *Layer, z *zap.Logger) *raft.NetworkTransport {
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  l,
		MaxPool: TransportMaxPool,
		Timeout: TransportTimeout,
		Logger:  NewHCLogger(z, "raft-transport"),
	})
}
