package plane

// This file holds the move cap (Placement.Moves within
// Config.RescheduleWindow, Placement.Capped) and the wake-up of backoffs
// when capacity may have come back.

import (
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
)

// movesWithin returns the moves of moves within the reschedule window
// before now (a suffix of moves: they are oldest first).
func (c *reconciler) movesWithin(moves []time.Time, now time.Time) []time.Time {
	window := c.conf().RescheduleWindow
	i := 0
	for i < len(moves) && now.Sub(moves[i]) >= window {
		i++
	}
	return moves[i:]
}

// recordMove returns moves with a move at now added and the moves that
// left the window dropped: a new slice (a placement's slices are
// replaced, never changed in place).
func (c *reconciler) recordMove(moves []time.Time, now time.Time) []time.Time {
	return slices.Concat(c.movesWithin(moves, now), []time.Time{now})
}

// capReason is the alert of a placement capped after n moves.
func (c *reconciler) capReason(pl *Placement, n int) string {
	return fmt.Sprintf("capped: lost, not placed again: moved %d times in the last %s (max_reschedules %d); "+
		"placed again once a move leaves controller.reschedule_window, or by `nodeld ctl start %.16s`",
		n, c.conf().RescheduleWindow, c.conf().MaxReschedules, pl.DecisionID)
}

// setCapped marks pl capped, logging it at warn the first time.
func (c *writer) setCapped(pl *Placement, n int) {
	c.mu.Lock()
	was := pl.Capped
	pl.Capped = true
	c.mu.Unlock()
	if !was {
		c.log.Warn("placement capped: lost and not placed again",
			zap.String("workload", pl.Workload), zap.String("decision", pl.DecisionID), zap.String("node", pl.Node),
			zap.Int("moves", n), zap.Duration("window", c.conf().RescheduleWindow),
			zap.Int("max_reschedules", c.conf().MaxReschedules))
	}
}

// uncapped clears pl's cap once its moves left the window.
func (c *writer) uncapped(pl *Placement) {
	c.mu.Lock()
	was := pl.Capped
	pl.Capped = false
	c.mu.Unlock()
	if was {
		c.log.Info("placement no longer capped: its moves left the window",
			zap.String("workload", pl.Workload), zap.String("decision", pl.DecisionID))
	}
}

// uncapLocked is the operator's Start of a capped placement: its moves
// are forgotten and its backoff cleared, so the next tick places it
// again. The caller holds mu, and chains the record.
func (c *writer) uncapLocked(pl *Placement) lifecycleRecord {
	pl.Capped, pl.Moves = false, nil
	pl.Attempts, pl.NextAttempt, pl.LastError = 0, time.Time{}, ""
	c.ops.verbDoneLocked(pl)
	c.wake = true
	return lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node, Workload: pl.Workload,
		From: string(pl.Life), To: string(pl.Life), Reason: "cap cleared by the operator (start): placed again at the next tick"}
}

// cappedLocked counts the capped placements. The caller holds mu.
func (c *reconciler) cappedLocked() int {
	n := 0
	for _, p := range c.placements {
		if p.Capped && p.Life == LifeLost {
			n++
		}
	}
	return n
}

// wakeBackoffs ends the backoff of every lost placement and declaration
// when a node became alive or a target was added since the last tick
// (c.wake): the room they wait for may be there now. The caller holds mu.
func (c *writer) wakeBackoffsLocked() {
	if !c.wake {
		return
	}
	c.wake = false
	for _, p := range c.placements {
		if p.Life == LifeLost && !p.NextAttempt.IsZero() {
			p.NextAttempt = time.Time{}
		}
	}
	for _, d := range c.decls {
		d.NextAttempt = time.Time{}
	}
}
