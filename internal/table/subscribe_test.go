package table

import (
	"testing"
)

func TestSubscribe(t *testing.T) {
	e := newEnv()
	ch, cancel := e.t.Subscribe()
	other, cancelOther := e.t.Subscribe()
	defer cancelOther()

	woke := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	if woke(ch) {
		t.Fatal("wake-up before any change")
	}
	e.t.ExposeToMesh("chat", true)
	if !woke(ch) || !woke(other) {
		t.Fatal("no wake-up after a change")
	}
	e.t.ExposeToMesh("chat", true) // no change
	if woke(ch) {
		t.Fatal("wake-up without a change")
	}
	// Many changes coalesce into one pending wake-up; the writer never blocks.
	for i := range 10 {
		e.t.SetProxyPort("chat", uint16(8000+i))
	}
	if !woke(ch) || woke(ch) {
		t.Fatal("changes did not coalesce into one wake-up")
	}
	e.t.AllowMeshPeer("chat", "n-a", true)
	if !woke(ch) {
		t.Fatal("serve_to change did not wake")
	}
	woke(other)

	cancel()
	cancel() // idempotent
	e.t.ExposeToMesh("chat", false)
	if woke(ch) {
		t.Fatal("wake-up after cancel")
	}
	if !woke(other) {
		t.Fatal("cancel of one subscription stopped another")
	}
}
