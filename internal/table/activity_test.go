package table

import "testing"

// TestActivity: a registration's activity counts the requests resolved to
// it and not yet answered, on the proxy's path (ResolveHeld) and the mesh
// serve path (LocalForPeerHeld) alike, and the requests answered.
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
	if a := s.Activity(); a != (Activity{InFlight: 2}) {
		t.Fatalf("two in flight: %+v", a)
	}
	local.Done()
	if a := s.Activity(); a != (Activity{InFlight: 1, Done: 1}) {
		t.Fatalf("after the local request: %+v", a)
	}
	peer.Done()
	if a := s.Activity(); a != (Activity{Done: 2}) {
		t.Fatalf("after the peer's request: %+v", a)
	}
	var zero Hold
	zero.Done()
	if a := s.Activity(); a != (Activity{Done: 2}) {
		t.Fatalf("the zero Hold counted: %+v", a)
	}
	var none *LocalSlot
	if a := none.Activity(); a != (Activity{}) {
		t.Fatalf("nil slot: %+v", a)
	}
}
