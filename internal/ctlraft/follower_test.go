package ctlraft

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/plane"
)

// A follower refuses the writes with a NotLeaderError naming the leader
// (what the daemon forwards to), answers the reads from its replica,
// carries no term to fence with, and reports its role, term and leader.
func TestFollowerRefusesWritesAndReadsReplica(t *testing.T) {
	h := newHarness(t, 3, 3)
	h.start()
	lead := h.waitLeader()
	id := h.place("one")
	for _, n := range h.ctls {
		if n == lead {
			if n.c.Term() == 0 || n.c.Leadership().Role != plane.RoleLeader {
				t.Fatalf("leader %s: term %d, %+v", n.Name, n.c.Term(), n.c.Leadership())
			}
			continue
		}
		ctx := context.Background()
		var nl *plane.NotLeaderError
		_, err := n.c.Place(ctx, plane.Order{Name: "x", PackageDir: "/pkg/echo"})
		if !errors.As(err, &nl) || nl.Leader != lead.ID() || !errors.Is(err, plane.ErrNotLeader) {
			t.Fatalf("%s: Place: %v, want a NotLeaderError naming %s", n.Name, err, lead.ID())
		}
		for verb, call := range map[string]func(context.Context, string) (plane.Placement, error){
			"Start": n.c.Start, "Stop": n.c.Stop, "Unload": n.c.Unload} {
			if _, err := call(ctx, id); !errors.As(err, &nl) || nl.Leader != lead.ID() {
				t.Fatalf("%s: %s: %v, want a NotLeaderError", n.Name, verb, err)
			}
		}
		if _, err := n.c.Demand(ctx, "chat", lead.ID()); !errors.As(err, &nl) {
			t.Fatalf("%s: Demand: %v, want a NotLeaderError", n.Name, err)
		}
		waitFor(t, n.Name+" to read the placement from its replica", func() bool { return n.ids()[id] })
		// The replica is the leader's state, field for field.
		waitFor(t, n.Name+"'s replica to be the leader's state", func() bool {
			return cmp.Equal(lead.c.Placements(), n.c.Placements())
		})
		// The decision, made on the leader, explains on the follower.
		ds := plane.ReplicaDecisions(n.store, id[:12])
		if len(ds) != 1 || ds[0].ID != id || !strings.Contains(ds[0].Explain, "decision_id: "+id) {
			t.Fatalf("%s: replicated decisions %+v", n.Name, ds)
		}
		info := n.c.Leadership()
		if info.Role != plane.RoleFollower || info.Leader != lead.ID() || info.Term != lead.c.Term() {
			t.Fatalf("%s: leadership %+v, want a follower of %s in term %d", n.Name, info, lead.ID(), lead.c.Term())
		}
		if n.c.Term() != 0 || n.c.Standby() != nil {
			t.Fatalf("%s: a follower with term %d and standby %v", n.Name, n.c.Term(), n.c.Standby())
		}
	}
	if got, _ := h.hosts.Copies("echo"); got != 1 {
		t.Fatalf("%d copies: a follower placed", got)
	}
}

// Acceptance 5: a single controller's controller.json is imported once,
// on the first start with raft, as one entry: the placements are there,
// nothing is placed twice, the file is kept as controller.json.imported
// and not read again (a restart does not import it again).
func TestImportStateFileOnce(t *testing.T) {
	h := newHarness(t, 1, 2)
	n := h.ctls[0]
	n.statePath = filepath.Join(n.Dir, "controller.json")
	// The controller before raft: it places with its state file.
	ck := ed25519.NewKeyFromSeed(make([]byte, 32))
	ch, _, err := chain.Open(filepath.Join(n.Dir, "old-chain.log"), ck, chain.Options{Now: h.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	old, err := plane.New(h.cfg, h.targets, plane.Deps{Now: h.clk.Now, Chain: ch, Dispatcher: h.hosts, StatePath: n.statePath})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range []string{"a", "b"} {
		rep, err := old.Place(context.Background(), plane.Order{Name: w, PackageDir: "/pkg/echo", Start: true,
			Config: ctl.InstanceConfig{Workload: w}})
		if err != nil || rep.Placed == nil {
			t.Fatalf("place %s: %v", w, err)
		}
		ids = append(ids, rep.DecisionID)
	}
	ch.Close()
	if got, _ := h.hosts.Copies("echo"); got != 2 {
		t.Fatalf("%d copies before the upgrade", got)
	}

	h.start()
	lead := h.waitLeader()
	if !holdsAll(lead, ids) {
		t.Fatalf("imported state holds %v, want %v", lead.ids(), ids)
	}
	if _, err := os.Stat(n.statePath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state file still there after the import: %v", err)
	}
	if _, err := os.Stat(n.statePath + ImportedSuffix); err != nil {
		t.Fatalf("imported state file not kept: %v", err)
	}
	for range 3 {
		if err := lead.c.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got, on := h.hosts.Copies("echo"); got != 2 {
		t.Fatalf("%d copies on %v after the import, want 2: placed twice", got, on)
	}
	// A restart reads raft, not the file: the same state, nothing new.
	n.kill()
	n.restart()
	lead = h.waitLeader()
	if got := lead.ids(); len(got) != 2 || !holdsAll(lead, ids) {
		t.Fatalf("after a restart: %v, want %v", got, ids)
	}
	if got, _ := h.hosts.Copies("echo"); got != 2 {
		t.Fatalf("%d copies after the restart", got)
	}
}

// A single controller grows into three as an operator does it: it runs
// alone (a one-voter cluster) and places; it restarts (kill -9) with the three
// listed (its raft state: it leads at once and adds the others), and the
// two new ones, with no state, wait to be added rather than start a
// cluster of their own (FirstBootWait). They catch up, and once the first
// is killed one of them leads with its state: one copy throughout.
func TestSingleControllerGrowsToThree(t *testing.T) {
	h := newHarness(t, 3, 2)
	a, b, c := h.ctls[0], h.ctls[1], h.ctls[2]
	a.voters = []string{a.ID()}
	b.held, c.held = true, true
	h.start()
	var lead *ctlNode
	waitFor(t, "a to lead alone", func() bool { lead = h.leaderAmong(a); return lead != nil })
	id := h.placeOn(a, "one")
	if err := a.store.SetVoters(context.Background(), h.voters()); err == nil {
		t.Fatal("a single controller took voters without a restart")
	}
	a.kill()
	a.voters = nil
	a.restart()
	b.bootWait, c.bootWait = FirstBootWait, FirstBootWait
	b.startController()
	c.startController()
	for _, n := range []*ctlNode{b, c} {
		waitFor(t, n.Name+" to catch up", func() bool { return n.ids()[id] })
		// A voter that has not yet learned the other was added refuses
		// its votes (raft's rule against removed servers): a leader lost
		// before then leaves no majority, as in any raft.
		waitFor(t, n.Name+" to know three voters", func() bool { return n.knownVoters() == 3 })
	}
	a.kill()
	next := h.waitLeader()
	if !next.ids()[id] {
		t.Fatalf("%s leads without the placement", next.Name)
	}
	if got, _ := h.hosts.Copies("echo"); got != 1 {
		t.Fatalf("%d copies", got)
	}
}

// knownVoters is the size of the raft configuration n knows.
func (n *ctlNode) knownVoters() int {
	r := n.store.r.Load()
	if r == nil {
		return 0
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	return len(f.Configuration().Servers)
}
