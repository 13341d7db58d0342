package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

// TestCtlExplainReadsTheChain: a node that runs a controller and a
// host (its self target) makes more decisions than the controller keeps
// explanations of (plane.MaxRecentReports); nodeld ctl explain of the
// first, by an 8-character prefix, is rebuilt from the audit chain:
// source chain, the decision and the candidates as they were.
func TestCtlExplainReadsTheChain(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshEchoPackage(t)
	cl := newCtlCluster(t, "a")
	a := startNodeAt(t, cl.dirs["a"], cl.config("a", nil, controllerSection(anchor, "200ms", "5s", "3s")+hostSection(cl.keys["a"], anchor), false), nil)
	sock := a.n.config().SocketPath()
	idA := a.n.id.ID()
	var nodes []operator.NodeDoc
	waitLong(t, "the controller to hear from its own host", func() bool {
		if _, _, rc := runCtl(t, "--socket", sock, "nodes"); rc != 0 {
			return false // the operator socket is not up yet
		}
		ctlJSON(t, sock, &nodes, "nodes")
		return len(nodes) == 1 && nodes[0].Liveness == "alive" && nodes[0].HasFacts
	})
	var first string
	for i := range plane.MaxRecentReports + 2 {
		rep, err := a.n.ctrl.Place(context.Background(), plane.Order{PackageDir: pkgDir, DryRun: true})
		if err != nil || rep.Decision.Chosen == nil {
			t.Fatalf("dry run %d: %v\n%s", i, err, rep.Explain())
		}
		if i == 0 {
			first = rep.DecisionID
		}
	}
	if _, ok := a.n.ctrl.Recent(first); ok {
		t.Fatal("the first decision is still among the recent ones")
	}
	var res operator.ExplainResult
	ctlJSON(t, sock, &res, "explain", first[:8])
	if res.Source != "chain" || res.DecisionID != first {
		t.Fatalf("explain %s: source %q, decision %s", first[:8], res.Source, res.DecisionID)
	}
	out, errOut, rc := runCtl(t, "--socket", sock, "explain", first[:8])
	for _, want := range []string{"decision: PLACED on " + idA, "1. " + idA + " eligible via ", "dry run", "decision_id: " + first, "(from the audit chain: entry "} {
		if rc != 0 || !strings.Contains(out, want) {
			t.Fatalf("explain = %d, lacks %q:\n%s\n%s", rc, want, out, errOut)
		}
	}
}

// TestCtlStartThroughController: on a node that runs a controller and a
// host, an instance the controller placed is stopped through it (ctl stop
// NODE INSTANCE) and started again by its decision id (ctl start ID): the
// host runs it again, and the controller's placement is no longer
// stopped, running as far as its lifecycle knows.
func TestCtlStartThroughController(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshEchoPackage(t)
	cl := newCtlCluster(t, "a")
	a := startNodeAt(t, cl.dirs["a"], cl.config("a", nil, controllerSection(anchor, "200ms", "5s", "3s")+hostSection(cl.keys["a"], anchor), false), nil)
	sock := a.n.config().SocketPath()
	idA := a.n.id.ID()
	var nodes []operator.NodeDoc
	waitLong(t, "the controller to hear from its own host", func() bool {
		if _, _, rc := runCtl(t, "--socket", sock, "nodes"); rc != 0 {
			return false
		}
		ctlJSON(t, sock, &nodes, "nodes")
		return len(nodes) == 1 && nodes[0].Liveness == "alive" && nodes[0].HasFacts
	})
	_, id := placeSettled(t, sock, idA, pkgDir)
	placement := func() operator.PlacementDoc {
		var ps []operator.PlacementDoc
		ctlJSON(t, sock, &ps, "placements")
		if len(ps) != 1 || ps[0].DecisionID != id {
			t.Fatalf("placements = %+v", ps)
		}
		return ps[0]
	}
	p := placement()
	hostState := func() string {
		for _, in := range a.n.host.Status().Instances {
			if in.ID == p.InstanceID {
				return in.State
			}
		}
		return "absent"
	}
	if out, errOut, rc := runCtl(t, "--socket", sock, "stop", "self", p.InstanceID); rc != 0 {
		t.Fatalf("stop = %d %q %q", rc, out, errOut)
	}
	if p = placement(); !p.Stopped || hostState() != "stopped" {
		t.Fatalf("after stop: placement %+v, host %s", p, hostState())
	}
	out, errOut, rc := runCtl(t, "--socket", sock, "start", id[:7])
	if rc != 1 || !strings.Contains(errOut, operator.CodeUnknownPlacement) {
		t.Fatalf("start of a 7-character decision prefix = %d %q %q, want unknown_placement (8 or more are needed)", rc, out, errOut)
	}
	// The 16 characters ctl placements shows name it, as for explain.
	out, errOut, rc = runCtl(t, "--socket", sock, "start", id[:16])
	if rc != 0 || !strings.Contains(out, "started "+p.InstanceID+" on "+idA) {
		t.Fatalf("start by a decision id prefix = %d %q %q", rc, out, errOut)
	}
	if p = placement(); p.Stopped || p.HostState != "running" || hostState() != "running" {
		t.Fatalf("after start: placement %+v, host %s", p, hostState())
	}
	if n := kindCounts(t, a.chain.Path())["plane.instance"]; n != 2 {
		t.Errorf("%d plane.instance entries, want the stop and the start", n)
	}
}
