package runner

import (
	"testing"
	"time"
)

// TestStartPoll: a starting server is checked every 25 ms for its first
// seconds and never less often than every 100 ms, so the host notices it
// ready within 100 ms (issue 24) however long it loads; it backs off to
// spare a server loading a large model. The fixed 100 ms poll noticed a
// small model up to 100 ms late before the role could be registered.
func TestStartPoll(t *testing.T) {
	tests := []struct {
		elapsed time.Duration
		want    time.Duration
	}{
		{0, 25 * time.Millisecond},
		{time.Second, 25 * time.Millisecond},
		{5*time.Second - time.Nanosecond, 25 * time.Millisecond},
		{5 * time.Second, 50 * time.Millisecond},
		{29 * time.Second, 50 * time.Millisecond},
		{30 * time.Second, 100 * time.Millisecond},
		{time.Hour, 100 * time.Millisecond},
	}
	for _, tc := range tests {
		if got := startPoll(tc.elapsed); got != tc.want {
			t.Errorf("startPoll(%s) = %s, want %s", tc.elapsed, got, tc.want)
		}
	}
	for e := time.Duration(0); e < maxStartTimeout; e += 250 * time.Millisecond {
		if p := startPoll(e); p > 100*time.Millisecond || p < 25*time.Millisecond {
			t.Fatalf("startPoll(%s) = %s, want between 25ms and 100ms", e, p)
		}
	}
}
