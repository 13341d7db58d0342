package demand

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/chain/chaintest"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/table"
)

// waitIdle waits until h has no call in flight for role.
func waitIdle(t *testing.T, h *Holds, role string) {
	t.Helper()
	meshtest.WaitFor(t, "the demand call to end", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		rc := h.roles[role]
		return rc != nil && !rc.inflight
	})
}

// A node on a workload's demand_from gets its standby advertisement and
// its held request's Want reaches the controller's handler once per
// coalescing window; a node not on it gets no advertisement, holds
// nothing, and its call is refused not_allowed, counted and chained,
// never handed to the handler.
func TestStandbyAndWantOverTheMesh(t *testing.T) {
	clock := newTestClock()
	b := newConsumer(t, "b", clock.Now)
	c := newConsumer(t, "c", clock.Now)
	fc := newFakeController(
		Standby{Role: "chat", Workload: "chat-w", Model: "m1", MaxWait: 30 * time.Second, DemandFrom: []string{b.n.ID()}, State: table.StateCold},
		Standby{Role: "embed", Workload: "embed-w", MaxWait: 20 * time.Minute, DemandFrom: []string{b.n.ID(), c.n.ID()}, State: table.StateCold},
	)
	rec := chaintest.New(t, chain.RecorderOptions{})
	cl := newController(t, fc, rec, b.n.Peer(), c.n.Peer())
	b.start(t, clock.Now, cl.a.Peer())
	c.start(t, clock.Now, cl.a.Peer())

	meshtest.WaitFor(t, "b to hold both standbys", func() bool {
		return len(b.n.Table.Standbys("chat")) == 1 && len(b.n.Table.Standbys("embed")) == 1
	})
	meshtest.WaitFor(t, "c to hold embed's standby", func() bool { return len(c.n.Table.Standbys("embed")) == 1 })
	if got := c.n.Table.Standbys("chat"); len(got) != 0 {
		t.Fatalf("c, not on chat's demand_from, holds its standby: %+v", got)
	}
	sb := b.n.Table.Standbys("chat")[0]
	if sb.Controller != cl.a.ID() || sb.State != table.StateCold || sb.Model != "m1" {
		t.Fatalf("b's standby = %+v", sb)
	}
	if w, ok := b.dem.Holds.Expect("chat"); !ok || w != 30*time.Second {
		t.Fatalf("b Expect(chat) = %v, %v", w, ok)
	}
	if w, ok := b.dem.Holds.Expect("embed"); !ok || w != MaxHoldWait {
		t.Fatalf("b Expect(embed) = %v, %v; want the cap", w, ok)
	}
	if _, ok := c.dem.Holds.Expect("chat"); ok {
		t.Fatal("c expects chat")
	}
	snap := b.n.Table.Snapshot()
	var shown bool
	for _, rs := range snap.Roles {
		if rs.Role == "chat" {
			shown = len(rs.OnDemand) == 1 && rs.OnDemand[0].Controller == cl.a.ID() && rs.OnDemand[0].State == table.StateCold
		}
	}
	if !shown {
		t.Fatalf("b's snapshot does not show chat as cold: %+v", snap.Roles)
	}

	// 50 held requests at once: one call.
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { b.dem.Holds.Want("chat") })
	}
	wg.Wait()
	<-fc.called
	waitIdle(t, b.dem.Holds, "chat")
	for range 10 {
		b.dem.Holds.Want("chat")
	}
	if calls, _ := fc.counts(); calls != 1 {
		t.Fatalf("handler called %d times within one window, want 1", calls)
	}
	if got := testutil.ToFloat64(b.dem.Client.met.answered.WithLabelValues(table.StateCold)); got != 1 {
		t.Fatalf("b's answered{cold} = %v", got)
	}
	// The next window: one more.
	clock.Advance(DemandInterval)
	b.dem.Holds.Want("chat")
	<-fc.called
	waitIdle(t, b.dem.Holds, "chat")
	if calls, starts := fc.counts(); calls != 2 || starts != 1 {
		t.Fatalf("handler calls %d starts %d, want 2 and 1", calls, starts)
	}
	if fc.from[0] != b.n.ID() {
		t.Fatalf("demand from %q, want b", fc.from[0])
	}

	// c has no standby for chat: Want sends nothing.
	c.dem.Holds.Want("chat")
	if got := testutil.ToFloat64(c.dem.Client.met.sent); got != 0 {
		t.Fatalf("c sent %v calls without a standby", got)
	}
	// c asks anyway: refused not_allowed, counted on both sides, chained.
	_, err := c.dem.Client.Call(context.Background(), cl.a.ID(), "chat")
	var ref *Refused
	if !errors.As(err, &ref) || ref.Code != CodeNotAllowed {
		t.Fatalf("c's call: %v, want not_allowed", err)
	}
	if got := cl.served(string(CodeNotAllowed)); got != 1 {
		t.Fatalf("served{not_allowed} = %v", got)
	}
	if got := testutil.ToFloat64(c.dem.Client.met.refused.WithLabelValues(string(CodeNotAllowed))); got != 1 {
		t.Fatalf("c's refused{not_allowed} = %v", got)
	}
	if calls, _ := fc.counts(); calls != 2 {
		t.Fatalf("a refused call reached the handler (%d calls)", calls)
	}
	rec.Flush(t)
	if n := chaintest.Count(t, rec.Entries(t), KindRefused).Chained; n != 1 {
		t.Fatalf("%d %s entries, want 1", n, KindRefused)
	}
	// c may demand embed.
	if state, err := c.dem.Client.Call(context.Background(), cl.a.ID(), "embed"); err != nil || state != table.StateCold {
		t.Fatalf("c demands embed: %q, %v", state, err)
	}
}

// A call signed by a key other than the link's, one for another node, a
// replayed one, an expired one, garbage and an unknown role are refused
// with their codes, counted and chained; none reaches the handler but the
// first of the replayed pair.
func TestForgedReplayedOtherPeerRefused(t *testing.T) {
	b := newConsumer(t, "b", nil)
	other := meshtest.NewIdentity(t)
	fc := newFakeController(Standby{Role: "chat", MaxWait: time.Minute, DemandFrom: []string{b.n.ID()}, State: table.StateCold})
	rec := chaintest.New(t, chain.RecorderOptions{})
	cl := newController(t, fc, rec, b.n.Peer())
	b.start(t, nil, cl.a.Peer())
	meshtest.WaitFor(t, "b to hold chat's standby", func() bool { return len(b.n.Table.Standbys("chat")) == 1 })
	aKey := cl.a.Ident.PublicKey()
	bKey := b.n.Ident.PrivateKey()
	now := time.Now()

	_, forged := request(t, other.PrivateKey(), cl.a.ID(), "chat", now)
	_, elsewhere := request(t, bKey, other.ID(), "chat", now)
	_, expired := request(t, bKey, cl.a.ID(), "chat", now.Add(-time.Hour))
	_, unknown := request(t, bKey, cl.a.ID(), "other-role", now)
	_, valid := request(t, bKey, cl.a.ID(), "chat", now)
	for _, c := range []struct {
		name string
		wire []byte
		code Code
	}{
		{"forged", forged, CodePeerMismatch},
		{"for another node", elsewhere, CodeNotForMe},
		{"expired", expired, CodeExpired},
		{"garbage", []byte(`{"payload":"eA==","public_key":"00","signature":"00"}`), CodeSignature},
		{"unknown role", unknown, CodeUnknownRole},
		{"valid", valid, ""},
		{"replayed", valid, CodeReplay},
	} {
		resp := rawCall(t, b.n, cl.a.ID(), aKey, c.wire)
		if resp.Code != c.code {
			t.Errorf("%s: code %q, want %q", c.name, resp.Code, c.code)
		}
		if c.code != "" && cl.served(string(c.code)) != 1 {
			t.Errorf("%s: served{%s} = %v", c.name, c.code, cl.served(string(c.code)))
		}
	}
	if calls, _ := fc.counts(); calls != 1 {
		t.Fatalf("handler called %d times, want 1", calls)
	}
	rec.Flush(t)
	if n := chaintest.Count(t, rec.Entries(t), KindRefused).Chained; n != 6 {
		t.Fatalf("%d %s entries, want 6 (one per code)", n, KindRefused)
	}
}

// 1,000 calls a second from one peer: the token bucket lets through at
// most its burst and rate, the handler starts the role once, and the
// chain grows by one entry and one summary for the flood.
func TestDemandFlood(t *testing.T) {
	b := newConsumer(t, "b", nil)
	fc := newFakeController(Standby{Role: "chat", MaxWait: time.Minute, DemandFrom: []string{b.n.ID()}, State: table.StateCold})
	rec := chaintest.New(t, chain.RecorderOptions{})
	cl := newController(t, fc, rec, b.n.Peer())
	b.start(t, nil, cl.a.Peer())
	meshtest.WaitFor(t, "b to hold chat's standby", func() bool { return len(b.n.Table.Standbys("chat")) == 1 })

	const calls, workers = 1000, 8
	start := time.Now()
	var (
		mu          sync.Mutex
		limited, ok int
		wg          sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for range calls / workers {
				_, err := b.dem.Client.Call(context.Background(), cl.a.ID(), "chat")
				var ref *Refused
				switch {
				case err == nil:
					mu.Lock()
					ok++
					mu.Unlock()
				case errors.As(err, &ref) && ref.Code == CodeRateLimited:
					mu.Lock()
					limited++
					mu.Unlock()
				default:
					t.Errorf("call: %v", err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d calls in %v, %d rate-limited", calls, elapsed, limited)
	handled, starts := fc.counts()
	if bound := DemandBurst + int(elapsed.Seconds()*DemandRate) + 1; handled > bound {
		t.Fatalf("handler called %d times in %v, bound %d", handled, elapsed, bound)
	}
	if starts != 1 {
		t.Fatalf("%d starts, want 1", starts)
	}
	// A call the bucket let through reaches the handler, or is answered
	// starting beside one in flight for the role (coalesced): never more
	// handled than answered.
	if limited+ok != calls || handled > ok {
		t.Fatalf("%d rate-limited, %d answered, %d handled, of %d calls", limited, ok, handled, calls)
	}
	rec.Advance(chain.DefaultRecordWindow)
	rec.Flush(t)
	tally := chaintest.Count(t, rec.Entries(t), KindRefused)
	if tally.Entries() > 2 || tally.Events() != uint64(limited) {
		t.Fatalf("chain: %d entries for %d events (%d refusals), want at most 2 entries", tally.Entries(), tally.Events(), limited)
	}
}

// A standby counts for the advertisement TTL from its receipt: once the
// controller stops sending it, it expires and Expect says no.
func TestStandbyExpiresWhenControllerStops(t *testing.T) {
	clock := newTestClock()
	b := newConsumer(t, "b", clock.Now)
	fc := newFakeController(Standby{Role: "chat", MaxWait: time.Minute, DemandFrom: []string{b.n.ID()}, State: table.StateCold})
	cl := newController(t, fc, nil, b.n.Peer())
	b.start(t, clock.Now, cl.a.Peer())
	meshtest.WaitFor(t, "b to hold chat's standby", func() bool { return len(b.n.Table.Standbys("chat")) == 1 })
	cl.a.Stop()
	clock.Advance(table.DefaultAdvertTTL)
	if _, ok := b.dem.Holds.Expect("chat"); !ok {
		t.Fatal("standby gone before its TTL")
	}
	clock.Advance(time.Millisecond)
	if _, ok := b.dem.Holds.Expect("chat"); ok {
		t.Fatal("standby of a stopped controller still expected past the TTL")
	}
}
