package mesh

import "time"

// backoffDelay is the wait before reconnect attempt n (0-based): BackoffBase
// doubled per attempt, capped at BackoffMax, then scaled into [d/2, d) by
// r in [0, 1) ("equal jitter"), so peers that lost each other together do
// not redial in lockstep.
func backoffDelay(attempt int, r float64) time.Duration {
	d := BackoffBase
	for i := 0; i < attempt && d < BackoffMax; i++ {
		d *= 2
	}
	d = min(d, BackoffMax)
	if r < 0 || r >= 1 {
		r = 0
	}
	half := d / 2
	return half + time.Duration(float64(half)*r)
}

// refusalLimiter admits at most RefusalAuditBurst refusal records per
// RefusalAuditWindow. Not safe for concurrent use: the Mesh guards it.
type refusalLimiter struct {
	windowStart time.Time
	inWindow    int
	suppressed  int
}

// allow reports whether a refusal at now is recorded. When it is, flushed
// is the number suppressed in earlier windows, to be recorded with it.
func (l *refusalLimiter) allow(now time.Time) (ok bool, flushed int) {
	if l.windowStart.IsZero() || now.Sub(l.windowStart) >= RefusalAuditWindow || now.Before(l.windowStart) {
		l.windowStart = now
		l.inWindow = 0
	}
	if l.inWindow >= RefusalAuditBurst {
		l.suppressed++
		return false, 0
	}
	l.inWindow++
	flushed, l.suppressed = l.suppressed, 0
	return true, flushed
}

// flush returns and clears the suppressed count once the window that
// suppressed them is over.
func (l *refusalLimiter) flush(now time.Time) int {
	if l.suppressed == 0 || now.Sub(l.windowStart) < RefusalAuditWindow {
		return 0
	}
	n := l.suppressed
	l.suppressed = 0
	return n
}
