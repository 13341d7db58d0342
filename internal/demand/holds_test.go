package demand

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/table"
)

// staticStandbys is a StandbyTable with fixed standbys.
type staticStandbys map[string][]table.Standby

func (s staticStandbys) Standbys(role string) []table.Standby { return s[role] }

// blockingCaller blocks every call until its ctx ends, telling each start.
type blockingCaller struct{ started chan string }

func (b blockingCaller) Call(ctx context.Context, _, role string) (string, error) {
	b.started <- role
	<-ctx.Done()
	return "", ctx.Err()
}

// Want never blocks, sends at most one call per role in flight, sends
// nothing while Run is not running, and Run returns only once the calls
// it started have: no goroutine is left behind.
func TestHoldsOwnsItsCalls(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	clock := newTestClock()
	bc := blockingCaller{started: make(chan string, 8)}
	h := &Holds{tbl: staticStandbys{
		"chat":  {{Role: "chat", Controller: "n-a", MaxWait: time.Hour}},
		"embed": {{Role: "embed", Controller: "n-a", MaxWait: time.Second}},
	}, call: bc, log: nopLogger(), now: clock.Now, roles: map[string]*roleCalls{}}

	h.Want("chat") // not running: dropped
	if w, ok := h.Expect("chat"); !ok || w != MaxHoldWait {
		t.Fatalf("Expect(chat) = %v, %v", w, ok)
	}
	if _, ok := h.Expect("none"); ok {
		t.Fatal("Expect(none) without a standby")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	waitRunning(t, h)
	for range 20 {
		h.Want("chat")
		h.Want("embed")
		h.Want("none")
		clock.Advance(DemandInterval) // a new window, but a call is in flight
	}
	got := map[string]bool{<-bc.started: true, <-bc.started: true}
	if !got["chat"] || !got["embed"] {
		t.Fatalf("calls started for %v", got)
	}
	select {
	case r := <-bc.started:
		t.Fatalf("a second call for %s while one was in flight", r)
	default:
	}
	cancel()
	<-done
	h.Want("chat") // stopped: dropped
	select {
	case r := <-bc.started:
		t.Fatalf("a call for %s after Run returned", r)
	default:
	}
}

func waitRunning(t *testing.T, h *Holds) {
	t.Helper()
	meshtest.WaitFor(t, "Holds to run", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.running
	})
}

// countingCaller answers every call at once, counting them by role.
type countingCaller struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingCaller) Call(_ context.Context, _, role string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[role]++
	return "starting", nil
}

func (c *countingCaller) count(role string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[role]
}

// A request held within DemandInterval of the last call (whose load may
// have ended since: an idle unload between two requests) gets one more
// call once the interval passed, not none; more requests in the same
// interval add no call of their own.
func TestHoldsCallAgainAfterTheInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cc := &countingCaller{calls: map[string]int{}}
		h := &Holds{tbl: staticStandbys{"chat": {{Role: "chat", Controller: "n-a", MaxWait: time.Hour}}},
			call: cc, log: nopLogger(), now: time.Now, roles: map[string]*roleCalls{}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { h.Run(ctx); close(done) }()
		synctest.Wait()

		h.Want("chat")
		synctest.Wait()
		if n := cc.count("chat"); n != 1 {
			t.Fatalf("%d calls for the first held request, want 1", n)
		}
		time.Sleep(DemandInterval / 2)
		for range 5 {
			h.Want("chat") // within the interval
		}
		synctest.Wait()
		if n := cc.count("chat"); n != 1 {
			t.Fatalf("%d calls within the interval, want still 1", n)
		}
		time.Sleep(DemandInterval/2 + time.Millisecond)
		synctest.Wait()
		if n := cc.count("chat"); n != 2 {
			t.Fatalf("%d calls once the interval passed, want 2: the held requests' one", n)
		}
		time.Sleep(2 * DemandInterval)
		synctest.Wait()
		if n := cc.count("chat"); n != 2 {
			t.Fatalf("%d calls with no request held since, want 2", n)
		}

		h.Want("chat") // a new window: at once
		time.Sleep(DemandInterval / 2)
		h.Want("chat") // waits for the interval, then Run stops
		cancel()
		<-done
		if n := cc.count("chat"); n != 3 {
			t.Fatalf("%d calls, want 3: none after Run stopped", n)
		}
	})
}
