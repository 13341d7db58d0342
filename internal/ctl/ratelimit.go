package ctl

import (
	"sync"
	"time"
)

// RateLimiter is a fixed-window budget: at most limit events per window,
// counting the events it turns away. The host uses it to chain at most
// UnauthRefusalsPerWindow refusals of unauthenticated requests per
// UnauthRefusalWindow, the suppressed count riding on the next chained
// one. It is safe for concurrent use.
type RateLimiter struct {
	limit  int
	window time.Duration
	now    func() time.Time

	// mu guards start, used and suppressed.
	mu         sync.Mutex
	start      time.Time // start of the current window; zero before the first event
	used       int       // events allowed in the current window
	suppressed int       // events turned away since the last allowed one
}

// NewRateLimiter returns a limiter allowing limit events per window on
// the clock now (nil means time.Now). A limit below 1 or a window of 0 or
// less takes the workload.ctl defaults.
func NewRateLimiter(limit int, window time.Duration, now func() time.Time) *RateLimiter {
	if limit < 1 {
		limit = UnauthRefusalsPerWindow
	}
	if window <= 0 {
		window = UnauthRefusalWindow
	}
	if now == nil {
		now = time.Now
	}
	return &RateLimiter{limit: limit, window: window, now: now}
}

// Allow records one event. It returns true if the event is within budget,
// with the number of events suppressed since the last allowed one (which
// the caller reports with this event); false if it is suppressed.
func (l *RateLimiter) Allow() (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	// A clock that went backwards starts a new window too.
	if l.start.IsZero() || now.Sub(l.start) >= l.window || now.Before(l.start) {
		l.start = now
		l.used = 0
	}
	if l.used >= l.limit {
		l.suppressed++
		return false, 0
	}
	l.used++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

// Suppressed returns the events suppressed since the last allowed one.
func (l *RateLimiter) Suppressed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.suppressed
}
