package httpfast

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestWatchdogOnItsConnectionsTimer: on an exchange context of the fast
// reader a Watchdog runs on its connection's one timer. A request begun
// while the timer is armed for an earlier one, which ended, is still cut
// at its own stall and not at the earlier one's; activity postpones the
// cut; one that stops is never cut; and a connection that ended arms
// nothing. The same with the timer's clock from its connection's start
// (base), as the fast reader's.
func TestWatchdogOnItsConnectionsTimer(t *testing.T) {
	t.Run("time.Now", func(t *testing.T) { testWatchdogOnConnTimer(t, false) })
	t.Run("base", func(t *testing.T) { testWatchdogOnConnTimer(t, true) })
}

func testWatchdogOnConnTimer(t *testing.T, based bool) {
	synctest.Test(t, func(t *testing.T) {
		const stall, total = 10 * time.Second, time.Hour
		ct := &ConnTimer{}
		if based {
			ct.base = time.Now()
			time.Sleep(time.Minute) // the connection's earlier exchanges
		}
		exchange := func() (*Context, *Watchdog) {
			ec := newExchangeCtx()
			ec.ct = ct
			w := &Watchdog{}
			w.Start(stall, total, nil, ec)
			return ec, w
		}
		quick, qw := exchange()
		qw.Stop() // a quick request
		time.Sleep(stall / 2)
		slow, sw := exchange()
		time.Sleep(stall/2 + time.Second) // past the quick one's stall
		synctest.Wait()
		if quick.Err() != nil || slow.Err() != nil {
			t.Fatalf("at the first request's stall: quick %v, slow %v", quick.Cause(), slow.Cause())
		}
		sw.Touch() // activity: the stall counts from here
		time.Sleep(stall - time.Second)
		synctest.Wait()
		if slow.Err() != nil {
			t.Fatalf("cut %v after activity, before its stall: %v", stall-time.Second, slow.Cause())
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if slow.Cause() != ErrStalled {
			t.Fatalf("a silent request past its stall: %v, want ErrStalled", slow.Cause())
		}
		sw.Stop()

		time.Sleep(3 * stall) // the timer fired with nothing watched: unarmed
		ended, ew := exchange()
		time.Sleep(stall / 2)
		ew.Stop()
		time.Sleep(2 * stall)
		synctest.Wait()
		if ended.Err() != nil {
			t.Fatalf("a request that stopped its watchdog was cut: %v", ended.Cause())
		}

		ct.Stop()
		late, lw := exchange()
		time.Sleep(2 * stall)
		synctest.Wait()
		if late.Err() != nil {
			t.Fatalf("an ended connection's timer cut a request: %v", late.Cause())
		}
		lw.Stop()
		ct.mu.Lock()
		armed := ct.armed
		ct.mu.Unlock()
		if armed {
			t.Fatal("an ended connection's timer is armed")
		}
	})
}

// TestWatchdogOwnTimer: off the fast reader a Watchdog keeps a timer of
// its own and cancels with its cancel function, at the request timeout
// even with activity.
func TestWatchdogOwnTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		w := &Watchdog{}
		w.Start(10*time.Second, 25*time.Second, cancel, nil)
		for range 4 {
			time.Sleep(5 * time.Second)
			w.Touch()
		}
		synctest.Wait()
		if ctx.Err() != nil {
			t.Fatalf("cut at 20 s with activity: %v", context.Cause(ctx))
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if context.Cause(ctx) != ErrRequestTimeout {
			t.Fatalf("at the request timeout: %v, want ErrRequestTimeout", context.Cause(ctx))
		}
		w.Stop()
	})
}
