package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctlforward"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

// raftRoles is who leads among the running controllers of a raftTrio, as
// a test of forwarding sees it: the leader (ticked until it leads and
// hears from the host) and the followers.
type raftRoles struct {
	t      *testing.T
	nodes  map[string]*mnode
	names  []string // the running controllers
	host   string   // the host's node id
	leader *mnode
	fols   []*mnode
}

// settle waits for one leader among the running controllers, ticks it
// until it leads and hears from the host, and takes the others as its
// followers.
func (r *raftRoles) settle() {
	r.t.Helper()
	r.leader, _ = raftLeader(r.t, r.nodes, r.names...)
	r.leader.waitAlive(r.host)
	r.fols = nil
	for _, n := range r.names {
		if n != r.leader.name {
			r.fols = append(r.fols, r.nodes[n])
		}
	}
}

// ctl runs nodeld ctl args on follower i's socket. A write refused
// not_leader changed nothing: the leadership moved (the shared test
// machine can starve raft's heartbeats), so the roles settle again and
// it is run again, on the follower i then is.
func (r *raftRoles) ctl(i int, args ...string) (out, errOut string, rc int) {
	r.t.Helper()
	for attempt := 0; ; attempt++ {
		out, errOut, rc = runCtl(r.t, append([]string{"--socket", r.fols[i].socket()}, args...)...)
		if rc == 0 || !strings.Contains(errOut, operator.CodeNotLeader) || attempt == 3 {
			return out, errOut, rc
		}
		r.t.Logf("ctl %v on %s: %s; the roles settle again", args, r.fols[i].name, errOut)
		r.settle()
	}
}

// forwards sums nodeld_ctlforward_requests_total{direction,result} over
// the named controllers.
func (r *raftRoles) forwards(direction, result string, names ...string) float64 {
	sum := 0.0
	for _, n := range names {
		sum += r.nodes[n].counter("nodeld_ctlforward_requests_total", map[string]string{"direction": direction, "result": result})
	}
	return sum
}

// TestRaftFollowerForwardsWrites (issue 25: nodeld ctl works against any
// controller): three controllers in raft and a host d. On a follower's
// socket, a place of a package directory is refused naming the leader and
// the way out, and nothing is placed; ctl place ID, stop, start and
// unload are forwarded to the leader, which decides and chains each once
// (no follower chains the decision); every replica holds the outcome, d
// runs what the leader placed, the CLI says the answer came from the
// leader, and both sides count the forwards. d, a mesh peer but no voter,
// may not forward. After the leader's kill, a follower forwards to the
// new leader.
func TestRaftFollowerForwardsWrites(t *testing.T) {
	t.Parallel()
	dir, anchor := meshLightPackage(t)
	m, nodes := raftTrio(t, anchor)
	idD := m.id("d")
	ctrls := []string{"a", "b", "c"}
	for _, n := range ctrls {
		if out, errOut, rc := runCLI(t, "package", "add", "--config", nodes[n].cfgPath, dir); rc != 0 {
			t.Fatalf("package add on %s = %d %q %q", n, rc, out, errOut)
		}
	}
	r := &raftRoles{t: t, nodes: nodes, names: ctrls, host: idD}
	r.settle()

	// A directory on the follower's disk is not forwarded.
	out, errOut, rc := runCtl(t, "--socket", r.fols[0].socket(), "place", dir)
	for _, want := range []string{"not_leader", "not the leader", "nodeld package add", "package id"} {
		if rc != 1 || !strings.Contains(errOut, want) {
			t.Fatalf("dir place on follower %s = %d, want a refusal saying %q\n%s\n%s", r.fols[0].name, rc, want, out, errOut)
		}
	}
	if !strings.Contains(errOut, m.id(r.leader.name)) && !strings.Contains(errOut, "no leader is known") {
		t.Fatalf("dir place on follower %s names no leader: %s", r.fols[0].name, errOut)
	}
	if ps := r.leader.ctrl().Placements(); len(ps) != 0 {
		t.Fatalf("a refused dir place placed %+v", ps)
	}

	// By package id: the leader resolves it in its store and places it.
	out, errOut, rc = r.ctl(0, "place", "echo-light")
	if rc != 0 || !strings.Contains(out, "forwarded to the leader "+m.id(r.leader.name)) {
		t.Fatalf("place by id on follower %s = %d\n%s\n%s", r.fols[0].name, rc, out, errOut)
	}
	ps := r.leader.ctrl().Placements()
	if len(ps) != 1 || ps[0].Node != idD || ps[0].Life != plane.LifePlaced || !strings.Contains(out, ps[0].DecisionID) {
		t.Fatalf("the leader's placements after the forwarded place: %+v\n%s", ps, out)
	}
	p := ps[0]
	// One decision, chained once, by the leader that made it.
	var chained []string
	for _, n := range ctrls {
		waitFor(t, n+"'s replica to hold the placement", func() bool { return hasPlacement(nodes[n].ctrl(), p.DecisionID, idD) })
		if _, ok := nodes[n].decision(p.DecisionID); ok {
			chained = append(chained, n)
		}
	}
	if len(chained) != 1 {
		t.Fatalf("decision %s chained by %v, want one controller", p.DecisionID, chained)
	}
	if got := nodes["d"].instances(); len(got) != 1 || got[0].InstanceID != p.InstanceID {
		t.Fatalf("d runs %+v, want the leader's %s", got, p.InstanceID)
	}

	// d is a mesh peer of the leader but no controller voter: its
	// forwarded stop is refused before it is read, and changes nothing.
	st, err := nodes["d"].n.mesh.OpenStream(t.Context(), m.id(r.leader.name), mesh.KindOperator)
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
	if got := r.forwards("in", "not_voter", ctrls...); got != 1 {
		t.Fatalf("the controllers counted %v refusals of non-voters, want 1", got)
	}
	if got := nodes["d"].instances(); len(got) != 1 || got[0].Status.State != "running" {
		t.Fatalf("d after a non-voter's forwarded stop: %+v", got)
	}

	// stop, start and unload on the other follower's socket, with its own
	// name for d.
	replicaOf := func(n string) (plane.Placement, bool) {
		for _, q := range nodes[n].ctrl().Placements() {
			if q.DecisionID == p.DecisionID {
				return q, true
			}
		}
		return plane.Placement{}, false
	}
	forward := func(want string, args ...string) {
		t.Helper()
		out, errOut, rc := r.ctl(1, args...)
		if rc != 0 || !strings.Contains(out, "forwarded to the leader "+m.id(r.leader.name)) || !strings.Contains(out, want) {
			t.Fatalf("ctl %v on follower %s = %d\n%s\n%s", args, r.fols[1].name, rc, out, errOut)
		}
	}
	forward("stopped "+p.InstanceID, "stop", "d", p.InstanceID)
	for _, n := range ctrls {
		waitFor(t, n+" to hold the placement stopped", func() bool { q, ok := replicaOf(n); return ok && q.Stopped })
	}
	forward("started "+p.InstanceID, "start", p.InstanceID)
	for _, n := range ctrls {
		waitFor(t, n+" to hold the placement started", func() bool { q, ok := replicaOf(n); return ok && !q.Stopped })
	}
	forward("unloaded "+p.InstanceID, "unload", "d", p.InstanceID)
	for _, n := range ctrls {
		waitFor(t, n+" to forget the placement", func() bool { _, ok := replicaOf(n); return !ok })
	}
	if got := nodes["d"].instances(); len(got) != 0 {
		t.Fatalf("d runs %+v after the forwarded unload", got)
	}
	instanceEntries := 0
	for _, n := range ctrls {
		instanceEntries += len(nodes[n].find("plane.instance", nil))
	}
	if instanceEntries != 3 {
		t.Fatalf("the controllers chained %d plane.instance entries, want the stop, the start and the unload", instanceEntries)
	}
	if sent, served := r.forwards("out", "answered", ctrls...), r.forwards("in", "served", ctrls...); sent < 4 || served != sent {
		t.Fatalf("forwards counted: %v answered to the followers, %v served by the leaders; want 4 or more, and equal", sent, served)
	}
	var list []operator.PlacementDoc
	ctlJSON(t, r.fols[1].socket(), &list, "placements")
	if len(list) != 0 {
		t.Fatalf("placements on a follower after the unload: %+v", list)
	}

	// The leader dies: a follower forwards to the new one.
	r.leader.kill()
	r.names = slices.DeleteFunc(r.names, func(n string) bool { return n == r.leader.name })
	r.settle()
	out, errOut, rc = r.ctl(0, "place", "echo-light")
	if rc != 0 || !strings.Contains(out, "forwarded to the leader "+m.id(r.leader.name)) {
		t.Fatalf("place by id on %s after the failover = %d\n%s\n%s", r.fols[0].name, rc, out, errOut)
	}
	ps = r.leader.ctrl().Placements()
	if len(ps) != 1 || ps[0].Node != idD || !strings.Contains(out, ps[0].DecisionID) {
		t.Fatalf("the new leader %s holds %+v", r.leader.name, ps)
	}
}
