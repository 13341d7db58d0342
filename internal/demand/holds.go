package demand

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/table"
)

// StandbyTable is the table as Holds reads it (*table.Table).
type StandbyTable interface {
	Standbys(role string) []table.Standby
}

var _ StandbyTable = (*table.Table)(nil)

// Caller sends one demand call (*Client).
type Caller interface {
	Call(ctx context.Context, controller, role string) (state string, err error)
}

// Holds tells the proxy which roles without a route are worth holding a
// request for (a fresh standby) and asks their controller when one is
// held. It is the proxy's hold plug (Expect, Want).
type Holds struct {
	tbl  StandbyTable
	call Caller
	log  *zap.Logger
	now  func() time.Time

	mu      sync.Mutex // guards the fields below
	ctx     context.Context
	running bool
	roles   map[string]*roleCalls
	wg      sync.WaitGroup
}

// roleCalls is the call state of one role.
type roleCalls struct {
	inflight bool
	deferred bool      // a call waits for next (sendLater)
	next     time.Time // no call before
}

// Expect reports whether role has a fresh standby, and how long a
// request may wait for it: its max_wait, capped at MaxHoldWait.
func (h *Holds) Expect(role string) (time.Duration, bool) {
	sbs := h.tbl.Standbys(role)
	if len(sbs) == 0 {
		return 0, false
	}
	return min(sbs[0].MaxWait, MaxHoldWait), true
}

// Want tells that a request for role is held: it sends the first
// standby's controller a demand call, on a goroutine of its own, unless
// one is in flight for role. Within DemandInterval of the last call the
// call waits until the interval passed (one waits at most per role):
// that call may have been for a load that has ended since (an idle
// unload between two requests), and the held request must not wait its
// whole hold for nothing. It never blocks, and does nothing while Run is
// not running.
func (h *Holds) Want(role string) {
	sbs := h.tbl.Standbys(role)
	if len(sbs) == 0 {
		return
	}
	controller := sbs[0].Controller
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running {
		return
	}
	rc := h.roles[role]
	if rc == nil {
		if len(h.roles) >= MaxHoldRoles {
			h.pruneLocked(now)
			if len(h.roles) >= MaxHoldRoles {
				return
			}
		}
		rc = &roleCalls{}
		h.roles[role] = rc
	}
	switch {
	case rc.inflight:
		return
	case now.Before(rc.next):
		if !rc.deferred {
			rc.deferred = true
			h.wg.Add(1)
			go h.sendLater(h.ctx, rc, controller, role, rc.next.Sub(now))
		}
		return
	}
	rc.inflight, rc.next = true, now.Add(DemandInterval)
	h.wg.Add(1)
	go h.send(h.ctx, rc, controller, role)
}

// sendLater waits d, then makes Want's call unless one is in flight.
func (h *Holds) sendLater(ctx context.Context, rc *roleCalls, controller, role string, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	h.mu.Lock()
	rc.deferred = false
	if rc.inflight || !h.running || ctx.Err() != nil {
		h.mu.Unlock()
		h.wg.Done()
		return
	}
	rc.inflight, rc.next = true, h.now().Add(DemandInterval)
	h.mu.Unlock()
	h.send(ctx, rc, controller, role) // its wg.Done is ours
}

// send makes one call and clears rc's flight.
func (h *Holds) send(ctx context.Context, rc *roleCalls, controller, role string) {
	defer h.wg.Done()
	state, err := h.call.Call(ctx, controller, role)
	if err != nil {
		h.log.Info("demand call failed", zap.String("role", role), zap.String("controller", controller), zap.Error(err))
	} else {
		h.log.Debug("demand call answered", zap.String("role", role), zap.String("controller", controller), zap.String("state", state))
	}
	h.mu.Lock()
	rc.inflight = false
	h.mu.Unlock()
}

// pruneLocked forgets the roles with no call in flight and none pending.
// Call with mu held.
func (h *Holds) pruneLocked(now time.Time) {
	for role, rc := range h.roles {
		if !rc.inflight && !now.Before(rc.next) {
			delete(h.roles, role)
		}
	}
}

// Run lets Want send calls until ctx ends, then waits for the calls in
// flight (their ctx is ctx) and returns.
func (h *Holds) Run(ctx context.Context) {
	h.mu.Lock()
	h.ctx, h.running = ctx, true
	h.mu.Unlock()
	<-ctx.Done()
	h.mu.Lock()
	h.running = false
	h.mu.Unlock()
	h.wg.Wait()
}
