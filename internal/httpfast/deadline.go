package httpfast

import "time"

// DeadlineSlack is how much later than wanted CoarseDeadline lets a
// connection's read deadline be.
const DeadlineSlack = time.Second

// CoarseDeadline decides the read deadline to set on a connection that
// has set (zero: none yet, or cleared) when want is wanted (zero: none).
// It returns change false when set already serves: no earlier than want
// and at most DeadlineSlack later. Otherwise it returns the deadline to
// set: want itself for a connection's first (or a cleared one), else
// want plus DeadlineSlack, so that a deadline re-armed for each request
// or frame changes the runtime's timer about once a second, not each
// time. A deadline wanted earlier than set is always set at once.
func CoarseDeadline(set, want time.Time) (next time.Time, change bool) {
	switch {
	case want.IsZero():
		return want, !set.IsZero()
	case set.IsZero():
		return want, true
	case !set.Before(want) && set.Sub(want) <= DeadlineSlack:
		return set, false
	default:
		return want.Add(DeadlineSlack), true
	}
}
