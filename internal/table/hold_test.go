package table

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestHoldKeepsAReleasedSlotUndrained: a registration released while a
// forward holds it is drained only when that forward is done; new
// resolutions go to the next registration (and hold it, not the released
// one) from the release on. Without holds a stop had nothing to wait for
// and cut the requests already on their way to the instance.
func TestHoldKeepsAReleasedSlotUndrained(t *testing.T) {
	tb := New(self, Options{})
	placed := mustRegister(t, tb, OriginPlaced, "chat", 1)
	adopted := mustRegister(t, tb, OriginAdopted, "chat", 2)

	tg, h1, ok := tb.ResolveHeld("chat")
	if !ok || tg.Base != "http://127.0.0.1:1" || tg.Model != "m1" {
		t.Fatalf("ResolveHeld = %+v %v, want the placed instance", tg, ok)
	}
	_, h2, _ := tb.ResolveHeld("chat")
	if n := placed.Holds(); n != 2 {
		t.Fatalf("placed holds = %d, want 2", n)
	}
	placed.Release()
	if closed(placed.Drained()) {
		t.Fatal("drained while two forwards hold it")
	}
	tg, h3, ok := tb.ResolveHeld("chat")
	if !ok || tg.Base != "http://127.0.0.1:2" {
		t.Fatalf("after the release ResolveHeld = %+v %v, want the adopted server", tg, ok)
	}
	if placed.Holds() != 2 || adopted.Holds() != 1 {
		t.Fatalf("holds placed %d adopted %d, want 2 and 1", placed.Holds(), adopted.Holds())
	}
	h1.Done()
	if closed(placed.Drained()) {
		t.Fatal("drained while one forward still holds it")
	}
	h2.Done()
	if !closed(placed.Drained()) {
		t.Fatal("not drained once released with every hold done")
	}
	h3.Done()
	if closed(adopted.Drained()) || adopted.Holds() != 0 {
		t.Fatal("a registration still registered reports drained")
	}
	placed.Release() // idempotent, drained stays closed
	var zero Hold
	zero.Done()
}

// TestReleaseWithoutHoldsIsDrained: nothing held, so drained at once; and
// the holds of a Resolve that finds nothing, or a remote target, are zero.
func TestReleaseWithoutHoldsIsDrained(t *testing.T) {
	e := newEnv("n-b")
	s := mustRegister(t, e.t, OriginPlaced, "chat", 1)
	tg, h, ok := e.t.ResolveHeld("chat")
	if !ok || tg.Kind != TargetLocal {
		t.Fatalf("ResolveHeld = %+v %v", tg, ok)
	}
	h.Done()
	s.Release()
	if !closed(s.Drained()) {
		t.Fatal("a released registration with no hold is not drained")
	}
	if _, h, ok := e.t.ResolveHeld("chat"); ok || h != (Hold{}) {
		t.Fatalf("nothing registered: ResolveHeld = %v with hold %+v", ok, h)
	}
	e.t.AllowRemoteNode("chat", "n-b", true)
	if !e.t.IngestAdvertisement("n-b", ad("chat", "n-b")) {
		t.Fatal("advertisement refused")
	}
	tg, h, ok = e.t.ResolveHeld("chat")
	if !ok || tg.Kind != TargetRemote || h != (Hold{}) {
		t.Fatalf("remote: ResolveHeld = %+v %v hold %+v, want a remote target and no hold", tg, ok, h)
	}
	h.Done()
}

// TestLocalForPeerHeld: the serving side of the mesh holds the
// registration like the proxy, within the same exposure rules.
func TestLocalForPeerHeld(t *testing.T) {
	tb := New(self, Options{})
	s := mustRegister(t, tb, OriginPlaced, "chat", 1)
	if _, h, ok := tb.LocalForPeerHeld("chat", "n-b"); ok || h != (Hold{}) {
		t.Fatal("held for a peer of a role that is not exposed")
	}
	tb.ExposeToMesh("chat", true)
	tb.AllowMeshPeer("chat", "n-b", true)
	l, h, ok := tb.LocalForPeerHeld("chat", "n-b")
	if !ok || l.Base != "http://127.0.0.1:1" || s.Holds() != 1 {
		t.Fatalf("LocalForPeerHeld = %+v %v, holds %d", l, ok, s.Holds())
	}
	s.Release()
	if closed(s.Drained()) {
		t.Fatal("drained while a peer's forward holds it")
	}
	h.Done()
	if !closed(s.Drained()) {
		t.Fatal("not drained after the peer's forward was done")
	}
}

// TestDrainedMeansNoForwardUsesIt races forwards against a release: once
// Drained is closed, no forward that resolved to the released
// registration is still using it, and none resolves to it any more. Run
// with -race.
func TestDrainedMeansNoForwardUsesIt(t *testing.T) {
	for range 20 {
		tb := New(self, Options{})
		placed := mustRegister(t, tb, OriginPlaced, "chat", 1)
		standby := mustRegister(t, tb, OriginAdopted, "chat", 2)
		var using atomic.Int64 // forwards between ResolveHeld and Done on the placed one
		var late atomic.Int64  // forwards that resolved to it after it was drained
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					tg, h, ok := tb.ResolveHeld("chat")
					if ok && tg.Base == "http://127.0.0.1:1" {
						using.Add(1)
						if closed(placed.Drained()) {
							late.Add(1)
						}
						runtime.Gosched() // the exchange
						using.Add(-1)
					}
					h.Done()
				}
			})
		}
		// Withdraw once the forwards are using it.
		for served := 0; served < 50; {
			if tg, h, ok := tb.ResolveHeld("chat"); ok && tg.Base == "http://127.0.0.1:1" {
				served++
				h.Done()
			}
		}
		placed.Release()
		select {
		case <-placed.Drained():
		case <-time.After(10 * time.Second):
			t.Fatalf("not drained: %d holds left", placed.Holds())
		}
		if n := using.Load(); n != 0 {
			t.Fatalf("%d forwards still use the instance once drained", n)
		}
		close(stop)
		wg.Wait()
		if n := late.Load(); n != 0 {
			t.Fatalf("%d forwards resolved to a drained registration", n)
		}
		if placed.Holds() != 0 || standby.Holds() != 0 {
			t.Fatalf("holds left: placed %d standby %d", placed.Holds(), standby.Holds())
		}
	}
}
