package plane

// Leadership: with a replicated store (Deps.Leadership) only the leader
// ticks, places, dispatches and answers demand calls; a follower answers
// the operator's reads from its replica and refuses the writes with a
// NotLeaderError naming the leader, which the daemon forwards to.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
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
	// Leads is set while this controller leads: its raft role is leader
	// and its state is rebuilt from the replica (it ticks and places).
	Leads bool
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
	// Applied counts the changes applied to the replica (entries and
	// snapshots restored): a follower reloads its read model when it
	// moved.
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

// leadState is the controller's side of the leadership (core.lead).
type leadState struct {
	// src is Deps.Leadership; nil: this controller always leads.
	src Leadership
	// leading is set once this controller rebuilt its state as the
	// leader (gainLead), cleared at once when it no longer leads.
	leading atomic.Bool
	// term is the term this controller leads in, 0 when it does not.
	term atomic.Uint64
	// replicaMu serialises reloading the replica (a follower's reads)
	// and gaining the lead; replicaGen is the store's Applied of the
	// state loaded last. Guarded by replicaMu.
	replicaMu  sync.Mutex
	replicaGen uint64
	// followMu serialises followLead (Run's loop, Tick): one rebuild per
	// lead gained. Taken before tickMu.
	followMu sync.Mutex
}

// leads reports whether this controller leads now: it may tick, place,
// dispatch and answer demands. Without a Leadership it always does.
func (c *core) leads() bool { return c.lead.src == nil || c.lead.leading.Load() }

// Term is the raft term this controller leads in, 0 when it does not
// lead (or has no Leadership). It is the term a fenced host call carries:
// a deposed leader keeps the term it led in, which hosts that saw a newer
// one refuse.
func (c *Controller) Term() uint64 {
	if !c.leads() {
		return 0
	}
	return c.lead.term.Load()
}

// Leadership returns the role, term and leader for `nodeld status`, and
// whether this controller leads; a controller without a Leadership is
// the leader of term 0.
func (c *Controller) Leadership() LeaderInfo {
	if c.lead.src == nil {
		return LeaderInfo{Role: RoleLeader, Leads: true}
	}
	info := c.lead.src.Leader()
	info.Leads = c.lead.leading.Load()
	return info
}

// notLeader is the error of a write on a follower, nil on the leader.
func (c *core) notLeader() error {
	if c.lead.src == nil || c.lead.leading.Load() {
		return nil
	}
	info := c.lead.src.Leader()
	if info.Role == RoleLeader {
		// Leader in raft, but its state is not rebuilt yet.
		info.Leader = ""
	}
	return &NotLeaderError{Leader: info.Leader}
}

// followLead acts on the store's leadership now: a controller that
// became the leader waits for the store's Barrier, rebuilds its state
// from the replica (as New loads it) and then leads; one that is no
// longer the leader stops leading at once.
func (c *core) followLead(ctx context.Context) {
	c.lead.followMu.Lock()
	defer c.lead.followMu.Unlock()
	info := c.lead.src.Leader()
	if info.Role != RoleLeader {
		if c.lead.leading.Swap(false) {
			c.lead.term.Store(0)
			c.log.Info("controller lost the lead", zap.Uint64("term", info.Term), zap.String("leader", info.Leader))
		}
		return
	}
	if c.lead.leading.Load() && c.lead.term.Load() == info.Term {
		return
	}
	if err := c.gainLead(ctx, info.Term); err != nil {
		c.log.Warn("controller could not take the lead", zap.Error(err))
		// Tried again on the next change or tick.
		return
	}
	c.log.Info("controller leads", zap.Uint64("term", info.Term))
	// Describe the nodes and step what it holds now, not a period later.
	c.wakeTick()
}

// gainLead rebuilds the state from the replica and leads in term.
func (c *core) gainLead(ctx context.Context, term uint64) error {
	c.lead.leading.Store(false)
	c.life.tickMu.Lock()
	defer c.life.tickMu.Unlock()
	bctx, cancel := context.WithTimeout(ctx, c.conf().PlaceTimeout)
	defer cancel()
	if err := c.lead.src.Barrier(bctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	c.lead.replicaMu.Lock()
	defer c.lead.replicaMu.Unlock()
	gen := c.lead.src.Applied()
	st, err := loadFrom(ctx, c.state)
	if err != nil {
		return err
	}
	info := c.lead.src.Leader()
	if info.Role != RoleLeader || info.Term != term {
		return fmt.Errorf("lead of term %d lost while rebuilding", term)
	}
	if err := c.restore(st, true); err != nil {
		return err
	}
	c.lead.replicaGen = gen
	c.lead.term.Store(term)
	c.lead.leading.Store(true)
	return nil
}

// refreshReplica reloads a follower's state from the replica when it
// changed since it was last loaded, so its reads answer from it. A
// leader's state is its own.
func (c *core) refreshReplica() {
	if c.lead.src == nil || c.lead.leading.Load() {
		return
	}
	c.lead.replicaMu.Lock()
	defer c.lead.replicaMu.Unlock()
	gen := c.lead.src.Applied()
	if gen == c.lead.replicaGen || c.lead.leading.Load() {
		return
	}
	st, err := loadFrom(context.Background(), c.state)
	if err != nil {
		c.log.Warn("controller replica not readable", zap.Error(err))
		return
	}
	if err := c.restore(st, false); err != nil {
		c.log.Warn("controller replica not readable", zap.Error(err))
		return
	}
	c.lead.replicaGen = gen
}

// restore replaces the placements and declarations with st's. fresh
// (New, a new leader) restores them as New loads them: a decision being
// dispatched is unsettled (the node may have acted), every node's
// liveness starts anew, and the writer learns what the store holds.
func (c *core) restore(st stateFile, fresh bool) error {
	now := c.now()
	if c.file == nil && fresh {
		// The writer learns what the store holds: its next save sends
		// what changed since.
		c.w.persistMu.Lock()
		c.w.delta = deltaCache{}
		_, err := c.w.delta.change(st.Placements, st.Declarations, nil)
		c.w.persistMu.Unlock()
		if err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.placements = make(map[string]*Placement, len(st.Placements))
	c.decls = make(map[string]*declState, len(st.Declarations))
	for _, d := range st.Declarations {
		c.decls[d.Name] = d
	}
	clear(c.gone)
	for _, p := range st.Placements {
		if fresh && p.Life == LifeDispatching {
			// The node may have acted on a place sent before the crash
			// (a follower's read shows the replica as it is).
			p.Life = LifeUnsettled
		}
		c.placements[p.DecisionID] = p
		if _, target := c.nodes[p.Node]; !target {
			c.gone[p.Node] = now
		}
	}
	if fresh {
		for id, n := range c.nodes {
			// Unheard from since now, as at a start.
			c.nodes[id] = &nodeState{target: n.target, lastContact: now}
		}
		c.decisions = nil
		clear(c.odReady)
	}
	return nil
}
