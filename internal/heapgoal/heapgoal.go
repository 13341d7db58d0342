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
// above a live heap of live bytes, and at least base. Go's goal is the
// larger of live + scan * percent/100, where scan is the live heap with
// the goroutine stacks and globals, and its minimum heap, 4 MiB scaled by
// percent/100 too: the percent is the one the first gives, rounded up,
// unless that would lift the minimum over live + headroom (a small live
// heap: a percent of 1500 makes a 60 MiB minimum), then the one that puts
// the minimum there.
func Percent(live, scan, headroom uint64, base int) int {
	p := uint64(MaxPercent)
	if scan > 0 {
		p = min(p, (headroom*100+scan-1)/scan)
	}
	p = min(p, (live+headroom)*100/heapMinimum)
	return max(base, int(p))
}

// heapMinimum is Go's minimum heap goal at GOGC=100 (the runtime's
// defaultHeapMinimum); it scales with the percent.
const heapMinimum = 4 << 20

// The runtime's metrics whose sum is the percent's base: a node's
// globals (a few MB) are often larger than its live heap, and a percent
// computed from the live heap alone put the goal two to four times the
// headroom above it.
const (
	liveMetric    = "/gc/heap/live:bytes"
	stacksMetric  = "/gc/scan/stack:bytes"
	globalsMetric = "/gc/scan/globals:bytes"
)

// liveAndScan reads the samples (liveMetric, stacksMetric,
// globalsMetric): the live heap, and its sum with the others.
func liveAndScan(s []metrics.Sample) (live, scan uint64) {
	for i, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			scan += v.Value.Uint64()
			if i == 0 {
				live = v.Value.Uint64()
			}
		}
	}
	return live, scan
}

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
			sample: []metrics.Sample{{Name: liveMetric}, {Name: stacksMetric}, {Name: globalsMetric}}}
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
	live, scan := liveAndScan(t.sample)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if p := Percent(live, scan, t.headroom, t.base); p != t.last {
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
