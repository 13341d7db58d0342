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
// fast reader's exchange context that timer is the connection's, armed
// by its first request and left armed across the next ones (connTimer):
// a request that ends before its deadlines costs no timer. Time is
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
	timer   *time.Timer // its own, off the fast reader
	ct      *connTimer  // its connection's, on the fast reader
}

// Start arms w for a request that cancels with cancel, or with ec's
// Cancel when ec is not nil.
func (w *Watchdog) Start(stall, total time.Duration, cancel context.CancelCauseFunc, ec *Context) {
	w.stall, w.total, w.cancel, w.ec, w.begin = stall, total, cancel, ec, time.Now()
	w.stopped.Store(false)
	if ec != nil && ec.ct != nil {
		w.ct = ec.ct
		w.ct.watch(w, w.begin.Add(min(stall, total)))
		return
	}
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
	case w.ct != nil:
		w.ct.unwatch(w)
	case w.timer != nil:
		w.timer.Stop()
	}
}

func (w *Watchdog) fire() {
	if next := w.check(time.Now()); !next.IsZero() {
		w.timer.Reset(time.Until(next))
	}
}

// check cancels the request past one of its deadlines at now, and then
// returns zero; else it returns when to look again.
func (w *Watchdog) check(now time.Time) time.Time {
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

// connTimer is a fast-reader connection's timer for the Watchdog of the
// exchange running (one at a time). It stays armed once armed: firing
// for a watchdog that stopped, it arms itself again for the one watched
// now, or stays unarmed until the next; so a quick request costs neither
// an allocation nor a change of the runtime's timer heap.
type connTimer struct {
	mu      sync.Mutex
	t       *time.Timer
	armed   bool      // t will fire, at at
	at      time.Time //
	w       *Watchdog // the one watched, due at due
	due     time.Time //
	stopped bool      // the connection ended
}

func (ct *connTimer) watch(w *Watchdog, due time.Time) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.stopped {
		return
	}
	ct.w, ct.due = w, due
	if !ct.armed || due.Before(ct.at) {
		ct.armLocked(due)
	}
}

func (ct *connTimer) unwatch(w *Watchdog) {
	ct.mu.Lock()
	if ct.w == w {
		ct.w = nil
	}
	ct.mu.Unlock()
}

func (ct *connTimer) armLocked(at time.Time) {
	if ct.t == nil {
		ct.t = time.AfterFunc(time.Until(at), ct.fire)
	} else {
		ct.t.Reset(time.Until(at))
	}
	ct.armed, ct.at = true, at
}

func (ct *connTimer) fire() {
	ct.mu.Lock()
	ct.armed = false
	w, due := ct.w, ct.due
	if w == nil || ct.stopped {
		ct.mu.Unlock()
		return
	}
	now := time.Now()
	if now.Before(due) {
		ct.armLocked(due) // armed for a watchdog that stopped
		ct.mu.Unlock()
		return
	}
	ct.mu.Unlock()
	next := w.check(now)
	ct.mu.Lock()
	defer ct.mu.Unlock()
	switch {
	case ct.stopped || ct.armed:
	case ct.w == w && !next.IsZero():
		ct.due = next
		ct.armLocked(next)
	case ct.w != nil && ct.w != w:
		ct.armLocked(ct.due) // watched while w was checked
	}
}

// stop releases the timer once the connection ended.
func (ct *connTimer) stop() {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	ct.stopped, ct.w = true, nil
	if ct.t != nil {
		ct.t.Stop()
	}
}
