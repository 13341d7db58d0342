package demand

import (
	"context"
	"testing"
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
