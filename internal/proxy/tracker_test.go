package proxy

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestTrackerWait: wait returns at once with no handler running, once the
// last running one is done, and false when one outlives the timeout.
func TestTrackerWait(t *testing.T) {
	var tr tracker
	if !tr.wait(time.Hour) {
		t.Fatal("wait with no handler: false")
	}
	tr.add()
	if tr.wait(time.Millisecond) {
		t.Fatal("wait with a handler running: true")
	}
	tr.done()
	if !tr.wait(time.Hour) {
		t.Fatal("wait after the handler was done: false")
	}
}

// TestTrackerWaitRacesDone: wait, racing the last handlers' done (and
// handlers that start and end meanwhile), returns true once they are all
// done, never after its timeout.
func TestTrackerWaitRacesDone(t *testing.T) {
	var tr tracker
	for trial := range 2000 {
		const handlers = 4
		for range handlers {
			tr.add()
		}
		var wg sync.WaitGroup
		for i := range handlers {
			wg.Go(func() {
				if i == 0 && trial%2 == 0 {
					tr.add() // one more starts before the last ends
					tr.done()
				}
				tr.done()
			})
		}
		if !tr.wait(10 * time.Second) {
			t.Fatalf("trial %d: wait timed out with %d handlers running", trial, tr.n.Load())
		}
		wg.Wait()
		if n := tr.n.Load(); n != 0 {
			t.Fatalf("trial %d: %d handlers running after all were done", trial, n)
		}
	}
}

// BenchmarkTracker is a handler's add and done, on every core: alone
// (the count often drops to 0) and among others running (under load,
// it never does).
func BenchmarkTracker(b *testing.B) {
	for _, others := range []int{0, 1} {
		b.Run("others="+strconv.Itoa(others), func(b *testing.B) {
			var tr tracker
			for range others {
				tr.add()
			}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tr.add()
					tr.done()
				}
			})
		})
	}
}
