package table

import (
	"testing"
	"time"
)

// TestActivity: a registration's activity counts the requests resolved to
// it and not yet answered, on the proxy's path (ResolveHeld) and the mesh
// serve path (LocalForPeerHeld) alike, and moves LastDone when one is
// answered; a registration that served nothing has a zero LastDone.
func TestActivity(t *testing.T) {
	tb := New(self, Options{})
	s := mustRegister(t, tb, OriginPlaced, "chat", 1)
	tb.ExposeToMesh("chat", true)
	tb.AllowMeshPeer("chat", "n-b", true)
	if a := s.Activity(); a != (Activity{}) {
		t.Fatalf("fresh registration: %+v, want the zero Activity", a)
	}
	_, local, _ := tb.ResolveHeld("chat")
	_, peer, _ := tb.LocalForPeerHeld("chat", "n-b")
	if a := s.Activity(); a.InFlight != 2 || !a.LastDone.IsZero() {
		t.Fatalf("two in flight: %+v", a)
	}
	before := time.Now()
	local.Done()
	a := s.Activity()
	if a.InFlight != 1 || a.LastDone.Before(before) {
		t.Fatalf("after the local request: %+v, want 1 in flight and LastDone at or after %s", a, before)
	}
	first := a.LastDone
	peer.Done()
	if a := s.Activity(); a.InFlight != 0 || a.LastDone.Before(first) {
		t.Fatalf("after the peer's request: %+v", a)
	}
	var none *LocalSlot
	if a := none.Activity(); a != (Activity{}) {
		t.Fatalf("nil slot: %+v", a)
	}
}
