package plane

// Leadership: with a replicated store (Deps.Leadership) only the leader
// ticks, places, dispatches and answers demand calls; a follower answers
// the operator's reads from its replica and refuses the writes with a
// NotLeaderError naming the leader, which the daemon forwards to.

import (
	"context"
	"errors"
	"fmt"
)

// Roles of a controller (LeaderInfo.Role).
const (
	RoleLeader    = "leader"
	RoleFollower  = "follower"
	RoleCandidate = "candidate"
	// RoleShutdown: its raft is not running (not yet, or no more).
	RoleShutdown = "shutdown"
)

// LeaderInfo is what a controller knows of the leadership now.
type LeaderInfo struct {
	// Role is this controller's raft role (RoleLeader, ...).
	Role string
	// Term is the current raft term as this controller knows it.
	Term uint64
	// Leader is the leader's node id, "" when none is known.
	Leader string
}

// Leadership is the replicated store's view of who leads
// (Deps.Leadership); *ctlraft.Store implements it.
type Leadership interface {
	// Leader returns the role, term and leader now.
	Leader() LeaderInfo
	// Changed receives (a channel of size 1) when the role or leader may
	// have changed.
	Changed() <-chan struct{}
	// Barrier returns once every entry committed before it is applied to
	// the replica; it fails unless this controller leads.
	Barrier(ctx context.Context) error
	// Applied is the index of the last entry applied to the replica: a
	// follower reloads its read model when it moved.
	Applied() uint64
}

// ErrNotLeader is wrapped by NotLeaderError.
var ErrNotLeader = errors.New("not the leader")

// NotLeaderError is returned by a follower's Place, Start, Stop, Unload
// and Demand, and by a store's Save off the leader: Leader is the node
// to forward to ("" when no leader is known now).
type NotLeaderError struct {
	Leader string
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "controller is not the leader, and no leader is known"
	}
	return fmt.Sprintf("controller is not the leader; the leader is %s", e.Leader)
}

// Unwrap makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }
