package raftmesh

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
)

// failoverBound is the generous bound on a new leader after the leader's
// kill in tests (-race, a shared 2-core host); LANConfig aims at under 3 s
// and the test logs the time measured.
const failoverBound = 10 * time.Second

// largeEntry is the size of the large entry replicated: a quarter MiB,
// hundreds of QUIC packets.
const largeEntry = 256 << 10

// Three voters, each a real mesh on 127.0.0.1 with raft over its layer:
// a leader is elected, an Apply on it reaches all three FSMs, and killing
// the leader (its socket first, as kill -9) yields a new leader among the
// two left, which commits in its turn.
func TestThreeVotersElectApplyAndFailover(t *testing.T) {
	nodes := newNodes(t, "a", "b", "c")
	voters := Config{Voters: ids(nodes...)}
	for i, n := range nodes {
		n.start(voters, nodes[:i]...)
	}
	link(t, nodes...)
	for _, n := range nodes {
		n.startRaft(nodes...)
	}

	var lead *node
	meshtest.WaitFor(t, "a leader", func() bool { lead = leader(nodes); return lead != nil })
	if err := lead.r.Apply(add(5), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply on the leader: %v", err)
	}
	// A large entry crosses the streams in many QUIC packets and flow
	// control windows.
	start := time.Now()
	if err := lead.r.Apply(make([]byte, largeEntry), 10*time.Second).Error(); err != nil {
		t.Fatalf("apply a large entry: %v", err)
	}
	t.Logf("a %d KiB entry committed in %v", largeEntry>>10, time.Since(start))
	for _, n := range nodes {
		meshtest.WaitFor(t, n.Name+" to apply both", func() bool { return n.fsm.Sum() == 5+largeEntry })
	}
	for _, n := range nodes {
		if n.streams("in", resultAccepted) == 0 && n.streams("out", resultOpened) == 0 {
			t.Errorf("%s: no raft stream counted", n.Name)
		}
	}

	oldTerm := term(lead)
	killed := time.Now()
	lead.kill()
	var next *node
	meshtest.WaitFor(t, "a new leader", func() bool { next = leader(nodes); return next != nil })
	took := time.Since(killed)
	t.Logf("new leader %s %v after the leader's kill (term %d -> %d)", next.Name, took, oldTerm, term(next))
	if took > failoverBound {
		t.Errorf("new leader after %v, want within %v", took, failoverBound)
	}
	if next == lead || term(next) <= oldTerm {
		t.Fatalf("leader %s term %d after %s term %d", next.Name, term(next), lead.Name, oldTerm)
	}
	if err := next.r.Apply(add(7), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply on the new leader: %v", err)
	}
	for _, n := range nodes {
		if !n.down {
			meshtest.WaitFor(t, n.Name+" to apply 7", func() bool { return n.fsm.Sum() == 12+largeEntry })
		}
	}
}

// A node the mesh admits but that is not in the voter set cannot reach
// raft: its stream is refused with CodeNotVoter and counted, and its
// AppendEntries at a term far ahead, which would depose the leader, never
// reaches raft (the leader's term and role are unchanged).
func TestNonVoterStreamRefused(t *testing.T) {
	nodes := newNodes(t, "a", "d")
	a, d := nodes[0], nodes[1]
	a.start(Config{Voters: []string{a.ID()}})
	// d thinks a is a voter with it; a does not list d.
	d.start(Config{Voters: []string{a.ID(), d.ID()}}, a)
	link(t, a, d)
	a.startRaft(a)
	meshtest.WaitFor(t, "a to lead itself", func() bool { return a.r.State() == raft.Leader })
	before := term(a)

	trans := NewTransport(d.layer, d.Logger)
	defer trans.Close()
	var resp raft.AppendEntriesResponse
	req := raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(d.ID()), Addr: []byte(d.ID())},
		Term: before + 1000}
	if err := trans.AppendEntries(raft.ServerID(a.ID()), raft.ServerAddress(a.ID()), &req, &resp); err == nil {
		t.Errorf("a non-voter's append entries was answered: %+v", resp)
	}

	c, err := d.layer.Dial(raft.ServerAddress(a.ID()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(meshtest.WaitTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Read(make([]byte, 1))
	if code, ok := mesh.ResetCode(err); !ok || code != CodeNotVoter {
		t.Errorf("read on a refused stream: %v, want reset %#x", err, CodeNotVoter)
	}

	if got := a.streams("in", resultNotVoter); got != 2 {
		t.Errorf("a counted %d refused streams, want 2", got)
	}
	if got := a.streams("in", resultAccepted); got != 0 {
		t.Errorf("a accepted %d streams, want 0", got)
	}
	if term(a) != before || a.r.State() != raft.Leader {
		t.Errorf("a: term %d -> %d, state %v: the append entries reached raft", before, term(a), a.r.State())
	}
}

// A voter that starts late, after the others compacted their log into a
// snapshot, catches up by raft's InstallSnapshot over the layer: its FSM
// is restored from the snapshot and its own store keeps it. Until it
// starts, its layer queues the others' streams, refusing them (CodeBusy)
// once the queue is full; raft then takes the queued ones first.
func TestLateVoterGetsSnapshot(t *testing.T) {
	nodes := newNodes(t, "a", "b", "c")
	voters := Config{Voters: ids(nodes...)}
	for i, n := range nodes {
		n.start(voters, nodes[:i]...)
	}
	link(t, nodes...)
	compact := func(c *raft.Config) { c.TrailingLogs = 2 }
	a, b, c := nodes[0], nodes[1], nodes[2]
	a.startRaftWith(compact, nodes...)
	b.startRaftWith(compact, nodes...)
	c.down = true // not started: leader() skips it
	var lead *node
	meshtest.WaitFor(t, "a leader of a and b", func() bool { lead = leader(nodes); return lead != nil })
	for range 20 {
		if err := lead.r.Apply(add(1), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := lead.r.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if first, err := lead.stores.Log.FirstIndex(); err != nil || first <= 2 {
		t.Fatalf("leader's log starts at %d (%v): not compacted", first, err)
	}

	c.down = false
	c.startRaft() // no bootstrap: the cluster already lists it
	meshtest.WaitFor(t, "c to catch up", func() bool { return c.fsm.Sum() == 20 })
	snaps, err := c.stores.Snapshots.List()
	if err != nil || len(snaps) == 0 {
		t.Fatalf("c has no snapshot (%v): it did not catch up by InstallSnapshot", err)
	}
	if err := lead.r.Apply(add(2), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, "c to apply after the snapshot", func() bool { return c.fsm.Sum() == 22 })
}
