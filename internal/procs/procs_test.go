package procs

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNext(t *testing.T) {
	for _, c := range []struct {
		name            string
		cur, max        int
		used            float64
		quiet           int
		want, wantQuiet int
	}{
		{"one thread busy: two", 1, 8, 0.7, 0, 2, 0},
		{"one thread under the raise: kept", 1, 8, 0.69, 0, 1, 0},
		{"one thread idle: kept, no quiet run", 1, 8, 0, 5, 1, 0},
		{"two busy: four", 2, 8, 1.5, 3, 4, 0},
		{"raise capped at the most", 4, 6, 3.9, 0, 6, 0},
		{"at the most and busy: kept", 6, 6, 6, 0, 6, 0},
		{"quiet: counted", 4, 8, 0.9, 3, 4, 4},
		{"quiet long enough: halved", 4, 8, 0.9, QuietIntervals - 1, 2, 0},
		{"between the thresholds: kept, quiet run reset", 4, 8, 1.5, 7, 4, 0},
		{"two quiet long enough: one", 2, 8, 0.4, QuietIntervals - 1, 1, 0},
		{"three quiet long enough: one", 3, 8, 0.1, QuietIntervals - 1, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, q := Next(c.cur, c.max, c.used, c.quiet)
			if n != c.want || q != c.wantQuiet {
				t.Errorf("Next(%d, %d, %v, %d) = %d, %d; want %d, %d", c.cur, c.max, c.used, c.quiet, n, q, c.want, c.wantQuiet)
			}
		})
	}
}

// load is a process whose CPU use is set by the test: cpu integrates it
// over (the bubble's) time.
type load struct {
	mu    sync.Mutex
	cores float64
	since time.Time
	total time.Duration
}

func (l *load) cpu() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.total += time.Duration(l.cores * float64(now.Sub(l.since)))
	l.since = now
	return l.total
}

func (l *load) use(cores float64) {
	l.cpu()
	l.mu.Lock()
	l.cores = cores
	l.mu.Unlock()
}

// TestAdaptFollowsLoad: one thread at the start; a busy interval doubles
// the count, up to the most; a low load halves it after QuietIntervals,
// down to one; an idle node is sampled each IdleInterval; stop sets the
// most again and ends the goroutine (synctest fails on one left).
func TestAdaptFollowsLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &load{since: time.Now()}
		var mu sync.Mutex
		var sets []int
		set := func(n int) { mu.Lock(); sets = append(sets, n); mu.Unlock() }
		got := func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), sets...) }
		step := func(d time.Duration) { time.Sleep(d); synctest.Wait() }

		stop := start(4, l.cpu, set)
		l.use(0.9) // over RaiseAt of one thread
		step(Interval + time.Millisecond)
		if d := cmp.Diff([]int{1, 2}, got()); d != "" {
			t.Fatalf("after a busy interval (-want +got):\n%s", d)
		}
		l.use(1.8) // over RaiseAt of two
		step(Interval)
		l.use(3.5) // the most is 4: no further
		step(3 * Interval)
		if d := cmp.Diff([]int{1, 2, 4}, got()); d != "" {
			t.Fatalf("under load (-want +got):\n%s", d)
		}
		l.use(0.3) // under LowerAt of 4 and of 2
		step(time.Duration(QuietIntervals-1) * Interval)
		if n := len(got()); n != 3 {
			t.Fatalf("lowered before %d quiet intervals: %v", QuietIntervals, got())
		}
		step(Interval)
		step(time.Duration(QuietIntervals) * Interval)
		if d := cmp.Diff([]int{1, 2, 4, 2, 1}, got()); d != "" {
			t.Fatalf("after the load fell (-want +got):\n%s", d)
		}
		// Idle at one thread: sampled each IdleInterval, so a new load
		// is seen within one.
		l.use(0)
		step(2 * Interval)
		l.use(0.95)
		step(IdleInterval - 3*Interval)
		if n := len(got()); n != 5 {
			t.Fatalf("an idle node sampled before IdleInterval: %v", got())
		}
		step(3 * Interval)
		if d := cmp.Diff([]int{1, 2, 4, 2, 1, 2}, got()); d != "" {
			t.Fatalf("load after idling (-want +got):\n%s", d)
		}
		stop()
		stop() // idempotent
		if d := cmp.Diff([]int{1, 2, 4, 2, 1, 2, 4}, got()); d != "" {
			t.Fatalf("after stop (-want +got):\n%s", d)
		}
	})
}

// With one CPU there is nothing to adapt: the count is never set.
func TestAdaptWithOneCPU(t *testing.T) {
	stop := start(1, func() time.Duration { t.Fatal("sampled"); return 0 }, func(int) { t.Fatal("set") })
	stop()
}
