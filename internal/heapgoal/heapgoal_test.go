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
		live, headroom uint64
		base, want     int
	}{
		{2 * mib, 16 * mib, 100, 800},    // goal 18 MiB
		{3 * mib, 16 * mib, 100, 534},    // rounded up
		{16 * mib, 16 * mib, 100, 100},   // the base already gives it
		{64 * mib, 16 * mib, 100, 100},   // a large heap keeps the base
		{64 * mib, 16 * mib, 150, 150},   // whatever the base is
		{100 << 10, 16 * mib, 100, 5000}, // bounded
		{0, 16 * mib, 100, 5000},
		{0, 16 * mib, 6000, 6000},
	} {
		if got := Percent(c.live, c.headroom, c.base); got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.headroom, c.base, got, c.want)
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
	live := liveBytes()
	// A headroom of 40 live heaps: a percent of about 4000, under
	// MaxPercent and well above the base, whatever the live heap.
	headroom := 40 * live
	stop := Keep(headroom, 100)
	if Percent(live, headroom, 100) <= 100 {
		t.Fatalf("test setup: percent %d for live %d", Percent(live, headroom, 100), live)
	}
	// The tuner sets, after each collection, the percent for the live
	// heap that collection marked: collect until the percent is the
	// one for the live heap now (it moves a little between collections).
	deadline := time.Now().Add(10 * time.Second)
	for p := gogc(); p <= 100 || p != int64(Percent(liveBytes(), headroom, 100)); p = gogc() {
		if time.Now().After(deadline) {
			t.Fatalf("GC percent %d after collections, want %d", p, Percent(liveBytes(), headroom, 100))
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
