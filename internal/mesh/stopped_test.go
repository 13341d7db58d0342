package mesh

import (
	"testing"
	"time"
)

// TestPeerStoppedReported: a peer whose link closes for shutdown (its
// graceful stop) and that does not link again within the restart wait is
// reported through OnPeerStopped, once; a peer that crashed (its link
// lost without a word) is not: its routes are dropped at once and
// nothing waits for it.
func TestPeerStoppedReported(t *testing.T) {
	stopped := make(chan string, 4)
	a, b := newNode(t, "a"), newNode(t, "b")
	a.onStopped = func(peer string) { stopped <- peer }
	a.restartWait = 200 * time.Millisecond
	a.start()
	b.start()
	a.apply(b.peer(true))
	waitFor(t, "b refusing a", func() bool { return a.state(b.listen).LastError != "" })
	b.apply(a.peer(true))
	waitFor(t, "link a-b", func() bool { return linked(a, b) })

	b.stop()
	select {
	case got := <-stopped:
		if got != b.id() {
			t.Fatalf("OnPeerStopped(%s), want %s", got, b.id())
		}
	case <-time.After(waitTimeout):
		t.Fatal("OnPeerStopped not called for a peer that stopped")
	}

	c := newNode(t, "c")
	c.liveness = 500 * time.Millisecond
	c.start()
	a.apply(b.peer(true), c.peer(true))
	c.apply(a.peer(true))
	waitFor(t, "link a-c", func() bool { return linked(a, c) })
	c.crash()
	waitFor(t, "a losing c's link", func() bool { return a.link(c.id()) == nil })
	a.m.mu.Lock()
	p := a.m.peerByIDLocked(c.id())
	away := p != nil && !p.awayAt.IsZero()
	a.m.mu.Unlock()
	if away {
		t.Fatal("a crashed peer is waited for as if it restarted or stopped")
	}
	select {
	case got := <-stopped:
		t.Fatalf("OnPeerStopped(%s) again", got)
	default:
	}
}
