package httpfast

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// The causes a Watchdog cancels its request's context with.
var (
	ErrStalled        = errors.New("upstream stalled")
	ErrRequestTimeout = errors.New("request timeout")
)

// Watchdog cancels one forwarded request when its upstream has been
// silent for the stall timeout (ErrStalled) or when the request timeout
// has passed (ErrRequestTimeout). Activity (Touch) only stores a time;
// a timer, when it fires, looks at whichever deadline is next. On the
// fast reader's exchange context that timer is the connection's
// (ConnTimer): a request that ends before its deadlines costs no timer. Time is
// measured on the monotonic clock, so tests drive it inside
// testing/synctest. A zero Watchdog is ready for Start.
type Watchdog struct {
	stall   time.Duration
	total   time.Duration
	cancel  context.CancelCauseFunc // or ec's Cancel when ec is set
	ec      *Context
	begin   time.Time
	last    atomic.Int64 // nanoseconds after begin of the latest activity
	stopped atomic.Bool
	timer   *time.Timer // its own, off the fast reader (else ec.ct)
}

// Start arms w for a request that cancels with cancel, or with ec's
// Cancel when ec is not nil.
func (w *Watchdog) Start(stall, total time.Duration, cancel context.CancelCauseFunc, ec *Context) {
	w.stall, w.total, w.cancel, w.ec = stall, total, cancel, ec
	w.stopped.Store(false)
	w.timer = nil
	if ec != nil && ec.ct != nil {
		// begin is only ever compared with monotonic readings (Touch,
		// Check): the connection's clock serves.
		w.begin = ec.ct.now()
		ec.ct.Watch(w, w.begin.Add(min(stall, total)))
		return
	}
	w.begin = time.Now()
	w.timer = time.AfterFunc(min(stall, total), w.fire)
}

// Touch records upstream activity.
func (w *Watchdog) Touch() {
	w.last.Store(int64(time.Since(w.begin)))
}

// Stop disarms w; it does not cancel the request.
func (w *Watchdog) Stop() {
	w.stopped.Store(true)
	switch {
	case w.timer != nil:
		w.timer.Stop()
	case w.ec != nil && w.ec.ct != nil:
		w.ec.ct.Unwatch(w)
	}
}

func (w *Watchdog) fire() {
	if next := w.Check(time.Now()); !next.IsZero() {
		w.timer.Reset(time.Until(next))
	}
}

// Check cancels the request past one of its deadlines at now, and then
// returns zero; else it returns when to look again (Checker).
func (w *Watchdog) Check(now time.Time) time.Time {
	if w.stopped.Load() {
		return time.Time{}
	}
	elapsed := now.Sub(w.begin)
	if elapsed >= w.total {
		w.cancelWith(ErrRequestTimeout)
		return time.Time{}
	}
	idle := elapsed - time.Duration(w.last.Load())
	if idle >= w.stall {
		w.cancelWith(ErrStalled)
		return time.Time{}
	}
	return now.Add(min(w.stall-idle, w.total-elapsed))
}

func (w *Watchdog) cancelWith(cause error) {
	if w.ec != nil {
		w.ec.Cancel(cause)
		return
	}
	w.cancel(cause)
}

// Checker is work a ConnTimer looks at when it is due.
type Checker interface {
	// Check runs at or after the due time given to Watch (or returned
	// last), at now: it returns when it is next due, or zero when it is
	// done (it ended its work, or has nothing left to wait for).
	Check(now time.Time) time.Time
}

// ConnTimer is a connection's timer for the Checker of the exchange it
// runs (one at a time): a timeout that most exchanges never reach. It
// stays armed once armed: firing for a Checker unwatched since, it arms
// itself again for the one watched now, or stays unarmed until the next.
// An exchange then costs neither an allocation nor a change of the
// runtime's timer heap, where a timer of its own costs both. A zero
// ConnTimer is ready; Stop it when the connection ends.
type ConnTimer struct {
	mu      sync.Mutex
	t       *time.Timer
	armed   bool      // t will fire, at at
	at      time.Time //
	c       Checker   // the one watched, due at due
	due     time.Time //
	stopped bool      // the connection ended
	// base, when its owner set it before the timer's first use (the
	// fast reader's connection's start), makes now one read of the
	// monotonic clock.
	base time.Time
}

// now is time.Now for deadlines and durations on ct's connection:
// monoNow from its base.
func (ct *ConnTimer) now() time.Time { return monoNow(ct.base) }

// monoNow is time.Now for times that are only compared with others read
// the same way or by time.Now (deadlines, timers, durations): base plus
// the time since on the monotonic clock, one clock read where time.Now
// takes two (the wall clock's too). Its wall reading misses a change of
// the wall clock since base, which no comparison sees: they use the
// monotonic readings. Without a base it is time.Now.
func monoNow(base time.Time) time.Time {
	if base.IsZero() {
		return time.Now()
	}
	return base.Add(time.Since(base))
}

// Watch has c checked at due (and at each time it returns), in place of
// the Checker watched so far.
func (ct *ConnTimer) Watch(c Checker, due time.Time) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.stopped {
		return
	}
	ct.c, ct.due = c, due
	if !ct.armed || due.Before(ct.at) {
		ct.armLocked(due)
	}
}

// Unwatch stops checking c, if it is the one watched; the timer stays
// armed for the next.
func (ct *ConnTimer) Unwatch(c Checker) {
	ct.mu.Lock()
	if ct.c == c {
		ct.c = nil
	}
	ct.mu.Unlock()
}

func (ct *ConnTimer) armLocked(at time.Time) {
	if ct.t == nil {
		ct.t = time.AfterFunc(time.Until(at), ct.fire)
	} else {
		ct.t.Reset(time.Until(at))
	}
	ct.armed, ct.at = true, at
}

func (ct *ConnTimer) fire() {
	ct.mu.Lock()
	ct.armed = false
	c, due := ct.c, ct.due
	if c == nil || ct.stopped {
		ct.mu.Unlock()
		return
	}
	now := time.Now()
	if now.Before(due) {
		ct.armLocked(due) // armed for a Checker unwatched since
		ct.mu.Unlock()
		return
	}
	ct.mu.Unlock()
	next := c.Check(now) // unlocked: it may Watch or Unwatch
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.c == c && !ct.stopped && !ct.armed && !next.IsZero() {
		ct.due = next
		ct.armLocked(next)
	}
}

// Stop releases the timer once the connection ended; Watch does nothing
// after it.
func (ct *ConnTimer) Stop() {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	ct.stopped, ct.c = true, nil
	if ct.t != nil {
		ct.t.Stop()
	}
}
