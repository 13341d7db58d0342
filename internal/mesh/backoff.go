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
