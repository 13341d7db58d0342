package main

import (
	"errors"
	"fmt"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/ctlraft"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/operator"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/plane"
)

// raftTrio starts three controllers a, b and c, each with the other two
// as controller.voters (so their state is in raft), and a host d that
// lists all three in host.controllers; every node peers with every other,
// paired. No node but d hosts.
func raftTrio(t *testing.T, anchor string) (*meshT, map[string]*mnode) {
	t.Helper()
	m := newMesh(t, "a", "b", "c", "d")
	nodes := map[string]*mnode{"d": m.start("d", raftConfig(m, "d", anchor, false))}
	for _, n := range []string{"a", "b", "c"} {
		m.node(n).bootWait = -1 // none holds state: nothing to wait for
		nodes[n] = m.start(n, raftConfig(m, n, anchor, true))
	}
	return m, nodes
}

// raftConfig is node name's config in a raftTrio: d a host of the three
// controllers; a, b or c a controller, with the other two as voters when
// voters is set (else a single controller).
func raftConfig(m *meshT, name, anchor string, voters bool) string {
	ctrls := []string{"a", "b", "c"}
	var peers []peer
	for _, n := range []string{"a", "b", "c", "d"} {
		if n != name {
			peers = append(peers, peer{name: n, tier: "paired"})
		}
	}
	if name == "d" {
		keys := make([]string, len(ctrls))
		for i, n := range ctrls {
			keys[i] = m.node(n).key
		}
		return m.config("d", peers, meshHost(strings.Join(keys, ", "), anchor))
	}
	var others []string
	for _, v := range ctrls {
		if v != name {
			others = append(others, v)
		}
	}
	extra := "  policy:\n    kinds:\n      inference: {min_tier: paired}\n    deny_nodes: [a, b, c]\n"
	if voters {
		extra = "  voters: [" + strings.Join(others, ", ") + "]\n" + extra
	}
	cfg := strings.Replace(meshController(anchor, ""), "  policy:\n    kinds:\n      inference: {min_tier: paired}\n", extra, 1)
	return m.config(name, peers, cfg)
}

// raftLeader waits until the running controllers among names agree on
// one leader that raft says leads, and returns it with the time it took.
func raftLeader(t *testing.T, nodes map[string]*mnode, names ...string) (*mnode, time.Duration) {
	t.Helper()
	start := time.Now()
	var leader *mnode
	waitFor(t, "one raft leader among "+strings.Join(names, ", "), func() bool {
		leader = nil
		var agreed string
		for _, n := range names {
			info := nodes[n].ctrl().Leadership()
			if info.Leader == "" || agreed != "" && info.Leader != agreed {
				return false
			}
			agreed = info.Leader
			if info.Role == plane.RoleLeader {
				leader = nodes[n]
			}
		}
		return leader != nil
	})
	return leader, time.Since(start)
}

// placeOnRaftLeader places dir on the leader among names, once it has
// described host: a place that changed no host because the lead moved
// under it (refused not_leader, or failed before any host was tried) runs
// again on the leader then, as an operator would, within waitTimeout (the
// shared test machine can starve raft's heartbeats). It returns the
// leader that answered, with the answer.
func placeOnRaftLeader(t *testing.T, nodes map[string]*mnode, dir, host string, names ...string) (*mnode, operator.PlaceResult, int, string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		leader, _ := raftLeader(t, nodes, names...)
		leader.waitAlive(host)
		res, rc, errOut := leader.placeJSON(dir)
		moved := rc != 0 && (strings.Contains(errOut, "not_leader") || res.Outcome == "failed" && len(res.Attempts) == 0)
		if !moved || time.Now().After(deadline) {
			return leader, res, rc, errOut
		}
		t.Logf("place on %s changed nothing, the lead moved (%s%s): placing on the leader again", leader.name, res.Outcome, strings.TrimSpace(errOut))
	}
}

// TestRaftControllersFailover (issue 25 acceptance 1, in process): three
// controllers replicate their state in raft over the mesh; a place on the
// leader is in every replica; the leader is killed, a new leader is
// elected among the two left, takes over the placement from its replica
// (nothing placed twice: d runs one instance), and its calls raise d's
// fencing term; the old leader comes back as a follower whose replica
// has the placement, and whose writes fail naming the leader.
func TestRaftControllersFailover(t *testing.T) {
	t.Parallel()
	dir, anchor := meshLightPackage(t)
	m, nodes := raftTrio(t, anchor)
	idD := m.id("d")
	old, took := raftLeader(t, nodes, "a", "b", "c")
	t.Logf("first leader %s after %v", old.name, took)
	old, res, rc, errOut := placeOnRaftLeader(t, nodes, dir, idD, "a", "b", "c")
	if rc != 0 || res.Outcome != "placed" || res.Node != idD {
		t.Fatalf("place on the leader %s = %d %+v\n%s", old.name, rc, res, errOut)
	}
	var rest []string
	for _, n := range []string{"a", "b", "c"} {
		if n != old.name {
			rest = append(rest, n)
		}
	}
	for _, n := range rest {
		waitFor(t, n+"'s replica to hold the placement", func() bool { return hasPlacement(nodes[n].ctrl(), res.DecisionID, idD) })
		// A follower explains the leader's decision from the replicated
		// records: its own chain does not hold it.
		var ex operator.ExplainResult
		ctlJSON(t, nodes[n].socket(), &ex, "explain", res.DecisionID)
		if ex.Source != "replica" || !strings.Contains(ex.Explain, "from the replicated state") {
			t.Fatalf("explain on follower %s: source %q\n%s", n, ex.Source, ex.Explain)
		}
		// A follower's write names the leader (the operator runs it there).
		if _, rc, errOut := nodes[n].placeJSON(dir); rc == 0 || !strings.Contains(errOut, "not the leader") {
			t.Fatalf("place on follower %s = %d\n%s", n, rc, errOut)
		}
	}
	oldTerm := old.ctrl().Term()
	if oldTerm == 0 {
		t.Fatalf("the leader %s leads in term 0", old.name)
	}

	old.kill()
	leader, took := raftLeader(t, nodes, rest...)
	t.Logf("new leader %s %v after the kill of %s", leader.name, took, old.name)
	leader.waitAlive(idD)
	for range 3 {
		leader.tick()
	}
	if !hasPlacement(leader.ctrl(), res.DecisionID, idD) {
		t.Fatalf("new leader %s lost the placement: %+v", leader.name, leader.ctrl().Placements())
	}
	if got := len(nodes["d"].instances()); got != 1 {
		t.Fatalf("d runs %d instances after the failover, want 1", got)
	}
	newTerm := leader.ctrl().Term()
	if newTerm <= oldTerm {
		t.Fatalf("new leader's term %d, old %d", newTerm, oldTerm)
	}
	// d heard the new term from the new leader's calls (fencing).
	if got := nodes["d"].counter("nodeld_host_controller_term", nil); got < float64(newTerm) {
		t.Fatalf("d's controller term %v, want at least %d", got, newTerm)
	}

	old.run()
	waitFor(t, old.name+" back as a follower of "+leader.name, func() bool {
		info := old.ctrl().Leadership()
		return info.Role == plane.RoleFollower && info.Leader == m.id(leader.name)
	})
	waitFor(t, old.name+"'s replica to hold the placement", func() bool { return hasPlacement(old.ctrl(), res.DecisionID, idD) })
	_, err := old.ctrl().Place(t.Context(), plane.Order{})
	var nl *plane.NotLeaderError
	if !errors.As(err, &nl) || nl.Leader != m.id(leader.name) {
		t.Fatalf("a write on the old leader: %v, want a NotLeaderError naming %s", err, leader.name)
	}
	if got := len(nodes["d"].instances()); got != 1 {
		t.Fatalf("d runs %d instances, want 1", got)
	}
	out, errOut, rc := runCLI(t, "status", "--addr", leader.n.admin.Addr().String())
	if status := out + errOut; rc != 0 || !strings.Contains(status, fmt.Sprintf("raft     leader, term %d, leader this node", newTerm)) {
		t.Fatalf("leader's status = %d:\n%s", rc, status)
	}
}

// hasPlacement reports whether c holds decision id, placed on node.
func hasPlacement(c *plane.Controller, id, node string) bool {
	for _, p := range c.Placements() {
		if p.DecisionID == id && p.Node == node {
			return true
		}
	}
	return false
}

// partition cuts the mesh between node a and each of others, both ways;
// heal (cut false) joins them again. Other links stay as they are.
func (m *meshT) partition(a string, others []string, cut bool) {
	na := m.node(a)
	for _, o := range others {
		no := m.node(o)
		no.relay.setCutFrom(na.addr, cut)
		na.relay.setCutFrom(no.addr, cut)
	}
}

// TestRaftControllersPartitionFenced (issue 25 acceptance 2, in process):
// the leader is cut off from the other two controllers but not from the
// host d. The majority elects a new leader, whose calls raise d's term;
// the old leader steps down; a call it still sends at its old term (one
// in flight when it was cut off) is refused stale_term by d and chained
// there, and changes nothing: d keeps its one instance. After healing,
// one leader, the old one a follower, and still one instance.
func TestRaftControllersPartitionFenced(t *testing.T) {
	t.Parallel()
	dir, anchor := meshLightPackage(t)
	m, nodes := raftTrio(t, anchor)
	idD := m.id("d")
	old, res, rc, errOut := placeOnRaftLeader(t, nodes, dir, idD, "a", "b", "c")
	if rc != 0 || res.Outcome != "placed" || res.Node != idD {
		t.Fatalf("place on the leader %s = %d %+v\n%s", old.name, rc, res, errOut)
	}
	insts := nodes["d"].instances()
	if len(insts) != 1 {
		t.Fatalf("d runs %d instances", len(insts))
	}
	oldTerm := old.ctrl().Term()
	var rest []string
	for _, n := range []string{"a", "b", "c"} {
		if n != old.name {
			rest = append(rest, n)
		}
	}

	m.partition(old.name, rest, true)
	leader, took := raftLeader(t, nodes, rest...)
	t.Logf("%s cut off; new leader %s after %v", old.name, leader.name, took)
	leader.waitAlive(idD)
	newTerm := leader.ctrl().Term()
	if got := nodes["d"].counter("nodeld_host_controller_term", nil); newTerm <= oldTerm || got < float64(newTerm) {
		t.Fatalf("terms: old %d, new %d, d's %v", oldTerm, newTerm, got)
	}
	waitFor(t, old.name+" to step down, alone", func() bool {
		old.tick()
		return old.ctrl().Term() == 0
	})
	// What the deposed leader may still have in flight: a stop at the term
	// it led in.
	deposed := dispatch.NewForController(old.n.dispatch, dispatch.ForControllerDeps{Term: func() uint64 { return oldTerm }})
	err := deposed.Stop(t.Context(), idD, insts[0].InstanceID)
	if !errors.Is(err, ctl.ErrStaleTerm) {
		t.Fatalf("a stop at the old term %d: %v, want stale_term", oldTerm, err)
	}
	if got := nodes["d"].instances(); len(got) != 1 || got[0].Status != insts[0].Status {
		t.Fatalf("d after the stale stop: %+v", got)
	}
	if refused := nodes["d"].find("", map[string]any{"code": string(ctl.CodeStaleTerm)}); len(refused) == 0 {
		t.Fatalf("d chained no stale_term refusal")
	}

	m.partition(old.name, rest, false)
	waitFor(t, old.name+" to follow "+leader.name+" again", func() bool {
		info := old.ctrl().Leadership()
		return info.Role == plane.RoleFollower && info.Leader == m.id(leader.name)
	})
	for range 2 {
		leader.tick()
	}
	if got := len(nodes["d"].instances()); got != 1 || !hasPlacement(old.ctrl(), res.DecisionID, idD) {
		t.Fatalf("after healing: d runs %d instances; %s's replica %+v", got, old.name, old.ctrl().Placements())
	}
}

// TestRaftUpgradeFromOneController (issue 25 acceptance 5): a controller
// that ran alone placed a workload (its state in controller.json); it and
// two new controllers restart as voters of each other, the new ones
// first. The old controller stands first (the others, with no state, wait
// ctlraft.FirstBootWait for a leader to add them), leads, imports its file once
// (kept as controller.json.imported) and carries on: the placement is in
// every replica, the host still runs one instance, nothing is placed
// again.
func TestRaftUpgradeFromOneController(t *testing.T) {
	t.Parallel()
	dir, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b", "c", "d")
	idD := m.id("d")
	d := m.start("d", raftConfig(m, "d", anchor, false))
	m.node("a").stateFile = true // a version before raft
	a := m.start("a", raftConfig(m, "a", anchor, false))
	a.waitAlive(idD)
	res, rc, errOut := a.placeJSON(dir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idD {
		t.Fatalf("place on the single controller = %d %+v\n%s", rc, res, errOut)
	}
	a.kill()
	a.stateFile = false
	nodes := map[string]*mnode{"a": a, "d": d}
	for _, n := range []string{"b", "c", "a"} {
		if n == "a" {
			if err := os.WriteFile(a.cfgPath, []byte(raftConfig(m, "a", anchor, true)), 0o600); err != nil {
				t.Fatal(err)
			}
			a.run()
			continue
		}
		nodes[n] = m.start(n, raftConfig(m, n, anchor, true))
	}
	leader, took := raftLeader(t, nodes, "a", "b", "c")
	t.Logf("leader %s after %v", leader.name, took)
	if leader != a {
		t.Fatalf("%s leads the new cluster, not a, which holds the state file", leader.name)
	}
	a.waitAlive(idD)
	for range 2 {
		a.tick()
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, plane.StateFile+ctlraft.ImportedSuffix)); err != nil {
		t.Fatalf("the imported file is not kept: %v", err)
	}
	for _, n := range []string{"a", "b", "c"} {
		waitFor(t, n+"'s replica to hold the imported placement", func() bool { return hasPlacement(nodes[n].ctrl(), res.DecisionID, idD) })
	}
	if got := len(d.instances()); got != 1 {
		t.Fatalf("d runs %d instances after the upgrade, want 1", got)
	}
	if got := len(a.find(plane.KindDecision, nil)); got != 1 {
		t.Fatalf("a chained %d decisions, want the one before the upgrade", got)
	}
}
