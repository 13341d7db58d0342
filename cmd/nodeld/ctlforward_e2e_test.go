package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctlforward"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

// TestRaftFollowerForwardsWrites (issue 25: nodeld ctl works against any
// controller): three controllers in raft and a host d. The package is in
// the leader's store only. On a follower's socket, a place of a package
// directory is refused naming the leader and the way out, and nothing is
// placed; ctl place ID, stop, start and unload are forwarded to the
// leader, which decides and chains each once; every replica holds the
// outcome, d runs what the leader placed, the CLI says the answer came
// from the leader, and both sides count the forwards.
func TestRaftFollowerForwardsWrites(t *testing.T) {
	t.Parallel()
	dir, anchor := meshLightPackage(t)
	m, nodes := raftTrio(t, anchor)
	idD := m.id("d")
	leader, _ := raftLeader(t, nodes, "a", "b", "c")
	leader.waitAlive(idD)
	var fol *mnode
	var others []*mnode
	for _, n := range []string{"a", "b", "c"} {
		if n != leader.name {
			others = append(others, nodes[n])
		}
	}
	fol = others[0]
	idLeader := m.id(leader.name)
	if out, errOut, rc := runCLI(t, "package", "add", "--config", leader.cfgPath, dir); rc != 0 {
		t.Fatalf("package add on the leader = %d %q %q", rc, out, errOut)
	}

	// A directory on the follower's disk is not forwarded.
	out, errOut, rc := runCtl(t, "--socket", fol.socket(), "place", dir)
	for _, want := range []string{"not_leader", "not the leader", idLeader, "nodeld package add", "package id"} {
		if rc != 1 || !strings.Contains(errOut, want) {
			t.Fatalf("dir place on follower %s = %d, want a refusal saying %q\n%s\n%s", fol.name, rc, want, out, errOut)
		}
	}
	if ps := leader.ctrl().Placements(); len(ps) != 0 {
		t.Fatalf("a refused dir place placed %+v", ps)
	}

	// By package id: the leader resolves it in its store and places it.
	out, errOut, rc = runCtl(t, "--socket", fol.socket(), "place", "echo-light")
	if rc != 0 || !strings.Contains(out, "forwarded to the leader "+idLeader) {
		t.Fatalf("place by id on follower %s = %d\n%s\n%s", fol.name, rc, out, errOut)
	}
	ps := leader.ctrl().Placements()
	if len(ps) != 1 || ps[0].Node != idD || ps[0].Life != plane.LifePlaced {
		t.Fatalf("the leader's placements after the forwarded place: %+v", ps)
	}
	p := ps[0]
	if !strings.Contains(out, p.DecisionID) {
		t.Fatalf("the forwarded place's output names no decision %s:\n%s", p.DecisionID, out)
	}
	if _, ok := leader.decision(p.DecisionID); !ok {
		t.Fatalf("the leader chained no decision %s", p.DecisionID)
	}
	for _, n := range others {
		waitFor(t, n.name+"'s replica to hold the placement", func() bool { return hasPlacement(n.ctrl(), p.DecisionID, idD) })
		if _, ok := n.decision(p.DecisionID); ok {
			t.Fatalf("follower %s chained the leader's decision itself", n.name)
		}
	}
	if got := nodes["d"].instances(); len(got) != 1 || got[0].InstanceID != p.InstanceID {
		t.Fatalf("d runs %+v, want the leader's %s", got, p.InstanceID)
	}

	// d is a mesh peer of the leader but no controller voter: its
	// forwarded stop is refused before it is read, and changes nothing.
	st, err := nodes["d"].n.mesh.OpenStream(t.Context(), idLeader, mesh.KindOperator)
	if err != nil {
		t.Fatal(err)
	}
	wire, _ := json.Marshal(operator.Request{Verb: operator.VerbStop, Node: idD, Args: operator.Args{Instance: p.InstanceID}})
	_ = st.SetDeadline(time.Now().Add(time.Minute))
	if err = mesh.WriteFrame(st, ctlforward.FrameRequest, wire); err == nil {
		_ = st.CloseWrite()
		_, _, err = mesh.ReadFrame(st, ctlforward.MaxResponseBytes)
	}
	if code, ok := mesh.ResetCode(err); !ok || code != ctlforward.CodeNotVoter {
		t.Fatalf("d's forwarded stop: %v, want a reset CodeNotVoter", err)
	}
	_ = st.Close()
	if got := leader.counter("nodeld_ctlforward_requests_total", map[string]string{"direction": "in", "result": "not_voter"}); got != 1 {
		t.Fatalf("the leader counted %v refusals of non-voters, want 1", got)
	}
	if got := nodes["d"].instances(); len(got) != 1 || got[0].Status.State != "running" {
		t.Fatalf("d after a non-voter's forwarded stop: %+v", got)
	}

	// stop, start and unload on the other follower's socket, with its own
	// name for d.
	other := others[1]
	replicaOf := func(n *mnode) (plane.Placement, bool) {
		for _, q := range n.ctrl().Placements() {
			if q.DecisionID == p.DecisionID {
				return q, true
			}
		}
		return plane.Placement{}, false
	}
	waitFor(t, other.name+"'s replica", func() bool { _, ok := replicaOf(other); return ok })
	forward := func(want string, args ...string) {
		t.Helper()
		out, errOut, rc := runCtl(t, append([]string{"--socket", other.socket()}, args...)...)
		if rc != 0 || !strings.Contains(out, "forwarded to the leader "+idLeader) || !strings.Contains(out, want) {
			t.Fatalf("ctl %v on follower %s = %d\n%s\n%s", args, other.name, rc, out, errOut)
		}
	}
	forward("stopped "+p.InstanceID, "stop", "d", p.InstanceID)
	for _, n := range []*mnode{leader, fol, other} {
		waitFor(t, n.name+" to hold the placement stopped", func() bool { q, ok := replicaOf(n); return ok && q.Stopped })
	}
	forward("started "+p.InstanceID, "start", p.InstanceID)
	for _, n := range []*mnode{leader, fol, other} {
		waitFor(t, n.name+" to hold the placement started", func() bool { q, ok := replicaOf(n); return ok && !q.Stopped })
	}
	forward("unloaded "+p.InstanceID, "unload", "d", p.InstanceID)
	for _, n := range []*mnode{leader, fol, other} {
		waitFor(t, n.name+" to forget the placement", func() bool { _, ok := replicaOf(n); return !ok })
	}
	if got := nodes["d"].instances(); len(got) != 0 {
		t.Fatalf("d runs %+v after the forwarded unload", got)
	}
	if got := len(leader.find("plane.instance", nil)); got != 3 {
		t.Fatalf("the leader chained %d plane.instance entries, want the stop, the start and the unload", got)
	}

	count := func(n *mnode, dir, result string) float64 {
		return n.counter("nodeld_ctlforward_requests_total", map[string]string{"direction": dir, "result": result})
	}
	if sent, served := count(fol, "out", "answered")+count(other, "out", "answered"), count(leader, "in", "served"); sent != 4 || served != 4 {
		t.Fatalf("forwards counted: %v sent by the followers, %v served by the leader; want 4 and 4", sent, served)
	}
	// The JSON answer is the leader's result, as on the leader.
	var list []operator.PlacementDoc
	ctlJSON(t, other.socket(), &list, "placements")
	if len(list) != 0 {
		t.Fatalf("placements on a follower after the unload: %+v", list)
	}
}
