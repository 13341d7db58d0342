package proxy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nodeld/nodeld/internal/httpfast"
)

// Causes of a forwarded request's context being cancelled by the proxy.
var (
	errStalled        = errors.New("upstream stalled")
	errRequestTimeout = errors.New("request timeout")
)

// watchdog cancels one forwarded request when the upstream has been silent
// for the stall timeout or when the request timeout has passed. It uses one
// timer per request: activity only stores a timestamp, and the timer, when
// it fires, re-arms itself for whichever deadline is next. Time is measured
// on the monotonic clock, so tests drive it inside testing/synctest.
type watchdog struct {
	stall   time.Duration
	total   time.Duration
	cancel  context.CancelCauseFunc // or ec's cancel when ec is set
	ec      *httpfast.Context
	begin   time.Time
	last    atomic.Int64 // nanoseconds after start of the latest activity
	stopped atomic.Bool
	timer   *time.Timer
}

// start arms a zero watchdog that cancels with cancel, or ec's cancel
// when ec is not nil.
func (w *watchdog) start(stall, total time.Duration, cancel context.CancelCauseFunc, ec *httpfast.Context) {
	w.stall, w.total, w.cancel, w.ec, w.begin = stall, total, cancel, ec, time.Now()
	w.timer = time.AfterFunc(min(stall, total), w.fire)
}

func (w *watchdog) cancelWith(cause error) {
	if w.ec != nil {
		w.ec.Cancel(cause)
		return
	}
	w.cancel(cause)
}

// touch records upstream activity.
func (w *watchdog) touch() {
	w.last.Store(int64(time.Since(w.begin)))
}

func (w *watchdog) fire() {
	if w.stopped.Load() {
		return
	}
	elapsed := time.Since(w.begin)
	if elapsed >= w.total {
		w.cancelWith(errRequestTimeout)
		return
	}
	idle := elapsed - time.Duration(w.last.Load())
	if idle >= w.stall {
		w.cancelWith(errStalled)
		return
	}
	w.timer.Reset(min(w.stall-idle, w.total-elapsed))
}

// stop disarms the watchdog; it does not cancel the request.
func (w *watchdog) stop() {
	w.stopped.Store(true)
	w.timer.Stop()
}
