package httpfast

import (
	"testing"
	"time"
)

// TestCoarseDeadline: the deadline decided is never earlier than wanted
// and at most DeadlineSlack later (a connection's first, or one after a
// clear, is exact); a deadline wanted anew a little later each time
// changes the socket's once per DeadlineSlack.
func TestCoarseDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	var set time.Time
	steps := []struct {
		want   time.Time
		change bool
		next   time.Time
	}{
		{at(10 * time.Second), true, at(10 * time.Second)},                  // the first: exact
		{at(10200 * time.Millisecond), true, at(11200 * time.Millisecond)},  // later: with the slack
		{at(10700 * time.Millisecond), false, at(11200 * time.Millisecond)}, // within it
		{at(10200 * time.Millisecond), false, at(11200 * time.Millisecond)}, // its edge
		{at(11201 * time.Millisecond), true, at(12201 * time.Millisecond)},  // past it
		{at(5 * time.Second), true, at(6 * time.Second)},                    // earlier: at once
		{time.Time{}, true, time.Time{}},                                    // cleared
		{time.Time{}, false, time.Time{}},                                   // already clear
		{at(time.Minute), true, at(time.Minute)},                            // after a clear: exact
	}
	for i, st := range steps {
		next, change := CoarseDeadline(set, st.want)
		if change != st.change || !next.Equal(st.next) {
			t.Fatalf("step %d: set %v, want %v: got (%v, %v), want (%v, %v)",
				i, set, st.want, next, change, st.next, st.change)
		}
		if st.want.IsZero() != next.IsZero() || next.Before(st.want) || next.Sub(st.want) > DeadlineSlack {
			t.Fatalf("step %d: deadline %v for %v", i, next, st.want)
		}
		set = next
	}
}

// TestConnNow: a connection's clock reads what time.Now reads, to the
// monotonic clock, with a monotonic reading of its own (what deadlines
// and timers compare).
func TestConnNow(t *testing.T) {
	fc := &fastConn{}
	fc.wdt.base = time.Now()
	for range 3 {
		before := time.Now()
		now := fc.now()
		after := time.Now()
		if now.Before(before) || after.Before(now) {
			t.Fatalf("now %v, not between %v and %v", now, before, after)
		}
		if now.Round(0) == now {
			t.Fatalf("now %v has no monotonic reading", now)
		}
		if d := now.Round(0).Sub(before.Round(0)); d < -time.Second || d > time.Second {
			t.Fatalf("now's wall reading %v, the wall clock's %v", now.Round(0), before.Round(0))
		}
	}
}
