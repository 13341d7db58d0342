package ctlraft

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/raftmesh"
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
	// A place whose save failed as the lead moved on a loaded host (the
	// placer tries again, as another workload) may have left a copy of its
	// own: what must never be is one decision placed twice.
	copies := h.placedCopies()
	for id, n := range copies {
		if n > 1 {
			t.Fatalf("decision %s placed %d times (copies by decision %v)", id, n, copies)
		}
	}
	if copies[first] != 1 || copies[second] != 1 {
		t.Fatalf("copies by decision %v, want %s and %s once each", copies, first, second)
	}
	lead.restart()
	for _, n := range h.ctls {
		waitFor(t, n.Name+" to hold both", func() bool { ids := n.ids(); return ids[first] && ids[second] })
	}
}

// Acceptance 3: a place acknowledged is in every controller's state
// after any single controller is killed, over 50 randomized kills in
// one run. A placer places continuously on whoever leads while the
// test kills a random controller (as kill -9: socket first) at a random
// moment, restarts it from its data dir and waits for it to catch up
// before the next kill (two down would be no majority). Raft runs on
// loopback timeouts (loopbackRaft): a leader's loss is noticed sooner.
func TestAcknowledgedPlacesSurviveFiftyKills(t *testing.T) {
	const kills = 50
	h := newHarness(t, 3, 3)
	h.tune = loopbackRaft
	h.start()
	h.waitLeader()
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))

	var (
		mu    sync.Mutex // guards acked
		acked []string
	)
	stop := make(chan struct{})
	placerDone := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				placerDone <- nil
				return
			default:
			}
			id, err := h.tryPlace(fmt.Sprintf("w%d", i), waitBound)
			if err != nil {
				placerDone <- err
				return
			}
			mu.Lock()
			acked = append(acked, id)
			mu.Unlock()
		}
	}()
	start := time.Now()
	// failovers are the times from a leader's kill to a new leader that
	// leads (rebuilt from its replica, the hosts described).
	var failovers []time.Duration
	for k := range kills {
		victim := h.ctls[rng.IntN(len(h.ctls))]
		// A random moment within the placer's stream of places.
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond) // a random kill time, not a wait for a condition
		led := victim.c.Leadership().Leads
		killed := time.Now()
		victim.kill()
		if led {
			h.waitLeader()
			failovers = append(failovers, time.Since(killed))
		}
		mu.Lock()
		before := len(acked)
		mu.Unlock()
		// The two left place at least one more (a new leader if the
		// victim led).
		waitFor(t, fmt.Sprintf("kill %d: a place with %s down", k, victim.Name), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) > before
		})
		victim.restart()
		mu.Lock()
		want := slices.Clone(acked)
		mu.Unlock()
		waitFor(t, fmt.Sprintf("kill %d: %s to catch up", k, victim.Name), func() bool { return holdsAll(victim, want) })
	}
	close(stop)
	if err := <-placerDone; err != nil {
		t.Fatal(err)
	}
	slices.Sort(failovers)
	if len(failovers) > 0 {
		t.Logf("%d kills (%d of the leader: a new leader in median %v, max %v), %d places acknowledged, in %v", kills,
			len(failovers), failovers[len(failovers)/2], failovers[len(failovers)-1], len(acked), time.Since(start))
	}
	for _, n := range h.ctls {
		waitFor(t, n.Name+" to hold every acknowledged place", func() bool { return holdsAll(n, acked) })
	}
	lead := h.waitLeader()
	// Exactly one copy of each placement the leader holds: none placed
	// twice, whatever was killed when.
	if got, on := h.hosts.Copies("echo"); got != len(lead.ids()) {
		t.Fatalf("%d copies on the hosts (%v), %d placements", got, on, len(lead.ids()))
	}
}

// testSeed is the seed of a randomized test: NODELD_TEST_SEED when set
// (to replay a failed run's kills), else the time. It is logged either way.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("NODELD_TEST_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("NODELD_TEST_SEED %q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seed %d (NODELD_TEST_SEED=%d replays it)", seed, seed)
	return seed
}

func holdsAll(n *ctlNode, ids []string) bool {
	have := n.ids()
	for _, id := range ids {
		if !have[id] {
			return false
		}
	}
	return true
}

// A leader stopped (not killed: its daemon shuts down, as in a rolling
// restart) hands the lead over: another controller leads well within
// an election timeout's wait, and nothing is lost.
func TestStoppedLeaderHandsOver(t *testing.T) {
	h := newHarness(t, 3, 1)
	h.start()
	lead := h.waitLeader()
	id := h.place("one")
	stopped := time.Now()
	lead.h.mu.Lock()
	lead.down = true
	lead.h.mu.Unlock()
	lead.stop()
	next := h.waitLeader()
	took := time.Since(stopped)
	t.Logf("%s leads %v after %s stopped", next.Name, took, lead.Name)
	// Without the hand-over the others wait HeartbeatTimeout (to twice
	// that) before they even stand.
	if took >= raftmesh.HeartbeatTimeout {
		t.Errorf("a new leader %v after the leader stopped, want under %v (handed over)", took, raftmesh.HeartbeatTimeout)
	}
	if next == lead || !next.ids()[id] {
		t.Fatalf("leader %s after %s stopped, holding %v", next.Name, lead.Name, next.ids())
	}
	if v := testutilLeaderChanges(lead); v == 0 {
		t.Fatal("no leader change counted")
	}
}
