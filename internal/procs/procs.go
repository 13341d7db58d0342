package procs

import (
	"runtime"
	"sync"
	"syscall"
	"time"
)

// The policy. RaiseAt and LowerAt are fractions of the thread count's
// capacity (one core a thread); the band between them keeps a load near
// a threshold from switching the count back and forth.
const (
	// RaiseAt: an interval that used this share of the count's cores or
	// more doubles the count.
	RaiseAt = 0.7
	// LowerAt: QuietIntervals in a row under this share halve it.
	LowerAt = 0.25
	// QuietIntervals is how long the load must stay low before a lowering.
	QuietIntervals = 10
	// Interval is the sampling period while the node works; IdleInterval
	// the one while it uses under IdleShare of one thread (fewer wake-ups
	// of an idle daemon).
	Interval     = 100 * time.Millisecond
	IdleInterval = time.Second
	IdleShare    = 0.05
)

// Next returns the thread count for the next interval, given the count
// cur in force during the last one, the cores used then, and how many
// quiet intervals (under LowerAt) preceded it; quietOut is the new run of
// quiet intervals.
func Next(cur, maxProcs int, used float64, quiet int) (n, quietOut int) {
	switch {
	case used >= RaiseAt*float64(cur):
		return min(maxProcs, cur*2), 0
	case cur > 1 && used < LowerAt*float64(cur):
		if quiet+1 >= QuietIntervals {
			return max(1, cur/2), 0
		}
		return cur, quiet + 1
	}
	return cur, 0
}

// adapter is Adapt's state; cpu and set are the process's CPU time and
// runtime.GOMAXPROCS, replaced in tests.
type adapter struct {
	max  int
	cpu  func() time.Duration
	set  func(int)
	stop chan struct{}
	done chan struct{}
}

// Adapt sets the thread count to 1 and adapts it between 1 and maxProcs
// until the returned function is called, which sets maxProcs again. With
// maxProcs 1 or less it does nothing.
func Adapt(maxProcs int) (stop func()) {
	return start(maxProcs, processCPU, func(n int) { runtime.GOMAXPROCS(n) })
}

func start(maxProcs int, cpu func() time.Duration, set func(int)) (stop func()) {
	if maxProcs <= 1 {
		return func() {}
	}
	a := &adapter{max: maxProcs, cpu: cpu, set: set, stop: make(chan struct{}), done: make(chan struct{})}
	set(1)
	go a.run()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(a.stop)
			<-a.done
			set(maxProcs)
		})
	}
}

func (a *adapter) run() {
	defer close(a.done)
	cur, quiet := 1, 0
	t := time.NewTimer(Interval)
	defer t.Stop()
	last, lastAt := a.cpu(), time.Now()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		now, at := a.cpu(), time.Now()
		used := 0.0
		if d := at.Sub(lastAt); d > 0 {
			used = float64(now-last) / float64(d)
		}
		last, lastAt = now, at
		n, q := Next(cur, a.max, used, quiet)
		if n != cur {
			a.set(n)
		}
		cur, quiet = n, q
		if cur == 1 && used < IdleShare {
			t.Reset(IdleInterval)
		} else {
			t.Reset(Interval)
		}
	}
}

// processCPU is the CPU time the process has used, user and system, all
// threads.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
