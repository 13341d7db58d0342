package holdq

import (
	"context"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

const testDeadline = 10 * time.Second

// watcher is a Watcher changed by the test.
type watcher struct {
	mu   sync.Mutex // guards gen, subs
	gen  uint64
	subs []chan struct{}
}

func (w *watcher) Generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

func (w *watcher) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs = append(w.subs, ch)
	w.mu.Unlock()
	return ch, func() {}
}

func (w *watcher) bump() {
	w.mu.Lock()
	w.gen++
	subs := w.subs
	w.mu.Unlock()
	for _, ch := range subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

type gauge struct{ n atomic.Int64 }

func (g *gauge) Inc() { g.n.Add(1) }
func (g *gauge) Dec() { g.n.Add(-1) }

// TestReleasedInOrderOnlyAfterAChange: waiters are released only once the
// watcher changed past their mark and the key is ready, in arrival order,
// each after the one before is Done.
func TestReleasedInOrderOnlyAfterAChange(t *testing.T) {
	w := &watcher{}
	var ready atomic.Bool
	g := &gauge{}
	qs := New(w, func(string) bool { return ready.Load() }, func(string) Gauge { return g })
	defer qs.Stop()
	const n = 5
	order := make(chan int, n)
	joined := make(chan struct{})
	for i := range n {
		go func() {
			res, tk := qs.Wait(context.Background(), "chat", w.Generation(), time.Now().Add(testDeadline), n, func() { joined <- struct{}{} }, 0, nil)
			if res == Released {
				order <- i
			} else {
				order <- -1
			}
			tk.Done()
		}()
		<-joined
	}
	if got := qs.Depth("chat"); got != n || qs.Depth("other") != 0 {
		t.Errorf("Depth = %d (other key %d), want %d held", got, qs.Depth("other"), n)
	}
	if (*Queues)(nil).Depth("chat") != 0 {
		t.Error("nil Queues hold something")
	}
	ready.Store(true)
	w.bump()
	for want := range n {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("release %d was waiter %d, want arrival order", want, got)
			}
		case <-time.After(testDeadline):
			t.Fatal("waiter not released")
		}
	}
	if g.n.Load() != 0 || qs.Depth("chat") != 0 {
		t.Errorf("depth %d (Depth %d) after all released, want 0", g.n.Load(), qs.Depth("chat"))
	}
}

// TestNotReleasedWithoutAChange: a ready key does not release a waiter
// whose mark is the current generation; its deadline ends the wait, and
// a full queue refuses at once.
func TestNotReleasedWithoutAChange(t *testing.T) {
	w := &watcher{}
	g := &gauge{}
	qs := New(w, func(string) bool { return true }, func(string) Gauge { return g })
	defer qs.Stop()
	joined := make(chan struct{})
	done := make(chan Result, 1)
	go func() {
		res, _ := qs.Wait(context.Background(), "chat", w.Generation(), time.Now().Add(50*time.Millisecond), 1, func() { close(joined) }, 0, nil)
		done <- res
	}()
	<-joined
	if res, _ := qs.Wait(context.Background(), "chat", 0, time.Now().Add(testDeadline), 1, nil, 0, nil); res != Full {
		t.Errorf("second waiter on a queue of 1: %v, want Full", res)
	}
	if res := <-done; res != TimedOut {
		t.Errorf("waiter: %v, want TimedOut", res)
	}
	if g.n.Load() != 0 {
		t.Errorf("depth %d, want 0", g.n.Load())
	}
}

// TestSSEWriterError: an error body after the head is one data: event per
// line group, never a bare line.
func TestSSEWriterError(t *testing.T) {
	rec := httptest.NewRecorder()
	s := &SSEWriter{ResponseWriter: rec}
	s.WriteHeader(503)
	_, _ = s.Write([]byte("{\n\"error\": 1}\n"))
	if got := rec.Body.String(); got != "data: {\ndata: \"error\": 1}\n\n" {
		t.Errorf("event %q", got)
	}
}

func FuzzWantsStream(f *testing.F) {
	f.Add([]byte(`{"stream":true}`))
	f.Add([]byte(`{"stream":false,"model":"m"}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = WantsStream(b) // must not panic
	})
}

// TestBackoff: the waits grow from BackoffFirst to BackoffMax, each in
// the upper half of its step; none passes the deadline; a context that
// ends stops the wait at once.
func TestBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b Backoff
		deadline := time.Now().Add(time.Hour)
		for i, step := range []time.Duration{5, 10, 20, 40, 50, 50} {
			step *= time.Millisecond
			start := time.Now()
			if !b.Wait(context.Background(), deadline) {
				t.Fatalf("wait %d: ended without its context ending", i)
			}
			if d := time.Since(start); d < step/2 || d > step {
				t.Errorf("wait %d lasted %s, want %s..%s", i, d, step/2, step)
			}
			if b.Tries != i+1 {
				t.Errorf("after wait %d: Tries %d", i, b.Tries)
			}
		}

		start := time.Now()
		if !b.Wait(context.Background(), start.Add(time.Millisecond)) {
			t.Fatal("wait up to a near deadline ended early")
		}
		if d := time.Since(start); d != time.Millisecond {
			t.Errorf("wait up to a deadline 1ms away lasted %s", d)
		}
		start = time.Now()
		if !b.Wait(context.Background(), start.Add(-time.Second)) || time.Since(start) != 0 {
			t.Errorf("wait past its deadline lasted %s, want none", time.Since(start))
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		start = time.Now()
		if b.Wait(ctx, deadline) {
			t.Fatal("wait whose context ended reported a try")
		}
		if d := time.Since(start); d != time.Millisecond {
			t.Errorf("wait whose context ended after 1ms lasted %s", d)
		}
	})
}
