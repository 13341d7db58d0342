package ctlraft

import (
	"testing"
	"time"
)

// Three controllers: the leader places; every follower's replica holds
// the placement; killing the leader (socket first, as kill -9) gives a
// new leader that resumes from its replica: the placement is there,
// not placed again (one copy), and it places in its turn.
func TestLeaderKillNewLeaderResumes(t *testing.T) {
	h := newHarness(t, 3, 3)
	h.start()
	lead := h.waitLeader()
	first := h.place("one")
	for _, n := range h.ctls {
		waitFor(t, n.Name+" to hold the placement", func() bool { return n.ids()[first] })
	}
	if got, on := h.hosts.Copies("echo"); got != 1 {
		t.Fatalf("%d copies on %v after one place", got, on)
	}
	killed := time.Now()
	lead.kill()
	next := h.waitLeader()
	t.Logf("new leader %s %v after %s's kill", next.Name, time.Since(killed), lead.Name)
	if next == lead {
		t.Fatal("the killed controller leads")
	}
	if !next.ids()[first] {
		t.Fatalf("new leader %s lost placement %s", next.Name, first)
	}
	second := h.place("two")
	if got, on := h.hosts.Copies("echo"); got != 2 {
		t.Fatalf("%d copies on %v after two places, want 2 (none placed twice)", got, on)
	}
	lead.restart()
	for _, n := range h.ctls {
		waitFor(t, n.Name+" to hold both", func() bool { ids := n.ids(); return ids[first] && ids[second] })
	}
}
