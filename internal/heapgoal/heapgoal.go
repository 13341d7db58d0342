package heapgoal

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// MaxPercent bounds the percent Keep sets, so that a tiny live heap does
// not make the goal a large multiple of it.
const MaxPercent = 5000

// Percent returns the GC percent that puts the heap goal headroom bytes
// above a live heap of live bytes, rounded up, and at least base: Go's
// goal is live * (1 + percent/100).
func Percent(live, headroom uint64, base int) int {
	if live == 0 {
		return max(base, MaxPercent)
	}
	p := (headroom*100 + live - 1) / live
	if p > MaxPercent {
		return max(base, MaxPercent)
	}
	return max(base, int(p))
}

const liveMetric = "/gc/heap/live:bytes"

// tuner sets the percent after each collection until stopped.
type tuner struct {
	headroom uint64
	base     int
	sample   []metrics.Sample

	mu      sync.Mutex
	stopped bool
	last    int // the percent last set
}

// sentinel is an object that lives until the next collection finds it
// unreachable; its cleanup is the tuner's hook. It holds a pointer, so it
// is never a tiny allocation (whose cleanups may not run).
type sentinel struct{ _ *byte }

// Keep keeps the heap goal at least headroom bytes above the live heap,
// from the next collection on, with base as the percent when that already
// holds (100 is Go's default). It returns the function that stops it; the
// last of several callers' stop sets base again, and the first caller's
// headroom and base hold until then (the percent is process-wide).
func Keep(headroom uint64, base int) (stop func()) {
	keepMu.Lock()
	defer keepMu.Unlock()
	if keepers++; keeping == nil {
		keeping = &tuner{headroom: headroom, base: base, last: base,
			sample: []metrics.Sample{{Name: liveMetric}}}
		debug.SetGCPercent(base)
		keeping.arm()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			keepMu.Lock()
			defer keepMu.Unlock()
			if keepers--; keepers == 0 {
				keeping.stop()
				keeping = nil
			}
		})
	}
}

var (
	keepMu  sync.Mutex
	keepers int    // Keep's callers not stopped yet
	keeping *tuner // nil when keepers is 0
)

func (t *tuner) arm() {
	runtime.AddCleanup(&sentinel{}, func(t *tuner) { t.collected() }, t)
}

// collected runs after a collection: it sets the percent for the live
// heap that collection marked, and arms for the next one.
func (t *tuner) collected() {
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if p := Percent(live, t.headroom, t.base); p != t.last {
		debug.SetGCPercent(p)
		t.last = p
	}
	t.arm()
}

func (t *tuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		debug.SetGCPercent(t.base)
	}
}
