package mesh

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A peer that vanishes without closing its link (SIGKILL, a frozen
// process, a cut path) is noticed within the liveness timeout, not after
// QUIC's idle timeout (three keep-alive periods): its link is retired and
// its advertisements stop resolving (the table hears it as a peer event).
func TestLivenessRetiresSilentPeer(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	for _, n := range []*testNode{a, b} {
		n.keepalive = 20 * time.Second // idle timeout 60 s: far beyond the wait below
		n.liveness = 400 * time.Millisecond
	}
	a.start()
	b.start()
	a.apply(b.peer(true))
	waitFor(t, "b refusing a", func() bool { return a.state(b.listen).LastError != "" })
	b.apply(a.peer(true))
	waitFor(t, "link a-b", func() bool { return linked(a, b) })
	a.serveChat("chat", b.id())
	b.tbl.AllowRemoteNode("chat", a.id(), true)
	waitFor(t, "b resolving chat on a", func() bool { return b.resolvesRemote("chat", a.id()) })
	// The link stays up while both ends hear each other: several
	// timeouts pass without a false alarm.
	deadline := time.Now().Add(4 * 400 * time.Millisecond)
	for time.Now().Before(deadline) {
		if !linked(a, b) {
			t.Fatal("a healthy link was closed by the liveness check")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// a goes silent: its socket is closed under quic-go, so no
	// CONNECTION_CLOSE reaches b, as with SIGKILL.
	a.m.mu.Lock()
	pc := a.m.tr.Conn
	a.m.mu.Unlock()
	silent := time.Now()
	_ = pc.Close()

	waitFor(t, "b retiring its link to a", func() bool { return b.link(a.id()) == nil })
	// The table hears of the lost link as a peer event, just after.
	waitFor(t, "b no longer resolving chat on a", func() bool { return !b.resolvesRemote("chat", a.id()) })
	took := time.Since(silent)
	if took > 5*time.Second {
		t.Errorf("silent peer noticed after %v, want within a few liveness timeouts (400ms)", took)
	}
	if got := testutil.ToFloat64(b.m.met.dead); got != 1 {
		t.Errorf("nodeld_mesh_links_dead_total = %v, want 1", got)
	}
	t.Logf("silent peer retired after %v", took)
}
