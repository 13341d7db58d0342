package heapgoal

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                 string
		live, scan, headroom uint64
		base, want           int
	}{
		{"the heap alone", 2 * mib, 2 * mib, 16 * mib, 100, 450},           // the minimum bounds it: 18 MiB
		{"stacks and globals count", 4 * mib, 8 * mib, 16 * mib, 100, 200}, // goal 4 + 8*2 = 20 MiB
		{"rounded up", 6 * mib, 9 * mib, 16 * mib, 100, 178},
		{"the base already gives it", 16 * mib, 16 * mib, 16 * mib, 100, 100},
		{"a large heap keeps the base", 64 * mib, 70 * mib, 16 * mib, 100, 100},
		{"whatever the base is", 64 * mib, 70 * mib, 16 * mib, 150, 150},
		{"a tiny heap: the minimum", 100 << 10, 3 * mib, 16 * mib, 100, 402}, // minimum 16.1 MiB
		{"nothing read: the minimum", 0, 0, 16 * mib, 100, 400},
		{"a base above it all", 0, 0, 16 * mib, 6000, 6000},
		{"bounded", 1 << 30, 1 << 10, 1 << 40, 100, MaxPercent},
	} {
		if got := Percent(c.live, c.scan, c.headroom, c.base); got != c.want {
			t.Errorf("%s: Percent(%d, %d, %d, %d) = %d, want %d", c.name, c.live, c.scan, c.headroom, c.base, got, c.want)
		}
	}
}

func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// Keep sets the percent that puts the goal the headroom above the live
// heap after a collection, and stop sets the base again and keeps it.
func TestKeepTunesAfterCollectionsAndStops(t *testing.T) {
	runtime.GC()
	// A headroom well above the heap and its minimum: a percent well
	// above the base.
	const headroom = 64 << 20
	stop := Keep(headroom, 100)
	if p := percentNow(headroom); p <= 100 {
		t.Fatalf("test setup: percent %d", p)
	}
	// The tuner sets, after each collection, the percent for the live
	// heap that collection marked: collect until the percent is the
	// one for the live heap now (it moves a little between collections).
	deadline := time.Now().Add(10 * time.Second)
	for p := gogc(); p <= 100 || p != int64(percentNow(headroom)); p = gogc() {
		if time.Now().After(deadline) {
			t.Fatalf("GC percent %d after collections, want %d", p, percentNow(headroom))
		}
		runtime.GC()
		runtime.Gosched()
	}
	stop()
	if p := gogc(); p != 100 {
		t.Fatalf("GC percent %d after stop, want 100", p)
	}
	// Later collections leave it alone.
	for range 5 {
		runtime.GC()
		runtime.Gosched()
	}
	if p := gogc(); p != 100 {
		t.Fatalf("GC percent %d after stop and collections, want 100", p)
	}
}

func liveBytes() uint64 {
	s := []metrics.Sample{{Name: liveMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// percentNow is the percent Keep sets for the heap now.
func percentNow(headroom uint64) int {
	s := []metrics.Sample{{Name: liveMetric}, {Name: stacksMetric}, {Name: globalsMetric}}
	metrics.Read(s)
	live, scan := liveAndScan(s)
	return Percent(live, scan, headroom, 100)
}

// The goal Keep puts in force is the headroom above the live heap, not a
// multiple of it: Go scales the percent by the stacks and globals too,
// which in a node (and in this test binary) are more than its live heap.
func TestKeepGoalIsHeadroomAboveLive(t *testing.T) {
	const headroom = 16 << 20
	stop := Keep(headroom, 100)
	defer stop()
	goal := func() (goal, live uint64) {
		s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: liveMetric}}
		metrics.Read(s)
		return s[0].Value.Uint64(), s[1].Value.Uint64()
	}
	// Collect until the percent set after one collection is in force
	// for the next (the tuner runs after each).
	var g, l uint64
	for range 5 {
		runtime.GC()
		runtime.Gosched()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		runtime.Gosched()
		g, l = goal()
		if p := gogc(); p == int64(percentNow(headroom)) || time.Now().After(deadline) {
			break
		}
	}
	// The percent is rounded up (at most 1% of the base over) and capped
	// at MaxPercent (under: the lower bound is loose).
	if above := g - l; above > headroom+headroom/50 || above < headroom/2 {
		t.Errorf("heap goal %d bytes above the live heap (%d), want about %d", above, l, headroom)
	}
}

// Two callers share one tuner: the percent stays tuned until the last
// one stops.
func TestKeepSharedUntilLastStop(t *testing.T) {
	runtime.GC()
	headroom := 40 * liveBytes()
	stop1 := Keep(headroom, 100)
	stop2 := Keep(1, 100) // shares the first's headroom
	tuned := func() bool { return gogc() > 100 }
	deadline := time.Now().Add(10 * time.Second)
	for !tuned() {
		if time.Now().After(deadline) {
			t.Fatalf("GC percent %d with two keepers", gogc())
		}
		runtime.GC()
		runtime.Gosched()
	}
	stop1()
	stop1() // once only
	if !tuned() {
		t.Fatalf("GC percent %d after the first stop, want still tuned", gogc())
	}
	stop2()
	if p := gogc(); p != 100 {
		t.Fatalf("GC percent %d after the last stop, want 100", p)
	}
}
