package main

// More meshtest helpers, for the controller lifecycle (9.10) and
// revocation (9.11) tests. Names carry an "lc" prefix so they stay apart
// from the harness's own.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

// lcOpts shapes an lcCluster.
type lcOpts struct {
	// ctrl is extra lines of A's controller section (two-space indent).
	ctrl string
	// tierC is C's tier in A's mesh.peers (default paired).
	tierC string
	// noC leaves C unstarted (its config is written; startC starts it).
	noC bool
	// twoNodes makes a cluster of A and B only.
	twoNodes bool
	// bSelf lets B's own operator act on B's host (B's key among its
	// host.controllers), behind A's back.
	bSelf bool
}

// lcCluster is A (controller, no host) with hosts B and C (unless
// twoNodes), all paired with each other, A their controller.
type lcCluster struct {
	m       *meshT
	a, b, c *mnode
	idB     string
	idC     string
	cfgC    string
	anchor  string
	pkgDir  string
}

// lcController is a controller section like meshController's, with a
// shorter describe timeout: a cut node's describe costs that much real
// time per tick until its link is known down.
func lcController(anchor, extra string) string {
	return fmt.Sprintf(`controller:
  enabled: true
  tick: 1s
  dead_after: 30s
  retry_backoff: 10s
  describe_timeout: 3s
  place_timeout: 60s
  trust_anchors: [%s]
  policy:
    kinds:
      inference: {min_tier: paired}
%s`, anchor, extra)
}

// aConfig renders A's config with C at tier tierC.
func (lc *lcCluster) aConfig(tierC, extra string) string {
	peers := []peer{{name: "b", tier: "paired"}}
	if lc.c != nil {
		peers = append(peers, peer{name: "c", tier: tierC})
	}
	return lc.m.config("a", peers, lcController(lc.anchor, extra))
}

func newLC(t *testing.T, o lcOpts) *lcCluster {
	t.Helper()
	pkgDir, anchor := meshEchoPackage(t)
	names := []string{"a", "b", "c"}
	if o.twoNodes {
		names = names[:2]
	}
	m := newMesh(t, names...)
	lc := &lcCluster{m: m, anchor: anchor, pkgDir: pkgDir, idB: m.id("b")}
	keyA := m.node("a").key
	hostB := meshHost(keyA, anchor)
	if o.bSelf {
		hostB = meshHost(keyA+", "+m.node("b").key, anchor)
	}
	if o.twoNodes {
		lc.b = m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, hostB))
	} else {
		lc.idC = m.id("c")
		lc.b = m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}, {name: "c", tier: "paired"}}, hostB))
		lc.cfgC = m.config("c", []peer{{name: "a", tier: "paired"}, {name: "b", tier: "paired"}}, meshHost(keyA, anchor))
		lc.c = m.node("c")
		if !o.noC {
			m.start("c", lc.cfgC)
		}
	}
	if o.tierC == "" {
		o.tierC = "paired"
	}
	lc.a = m.start("a", lc.aConfig(o.tierC, o.ctrl))
	alive := []string{lc.idB}
	if lc.c != nil && !o.noC && o.tierC != "discovered" {
		alive = append(alive, lc.idC)
	}
	lc.a.waitAlive(alive...)
	return lc
}

// startC starts C (an lcOpts.noC cluster).
func (lc *lcCluster) startC() { lc.m.start("c", lc.cfgC) }

// place places the package through A's operator socket with args before
// the package dir, and fails unless it was placed on want.
func (lc *lcCluster) place(want string, args ...string) operator.PlaceResult {
	t := lc.m.t
	t.Helper()
	res, rc, errOut := lc.a.placeJSON(append(args, lc.pkgDir)...)
	if rc != 0 || res.Outcome != "placed" || res.Node != want {
		t.Fatalf("place %v = %d %+v\n%s", args, rc, res, errOut)
	}
	return res
}

// advance moves the cluster's clock.
func (lc *lcCluster) advance(d time.Duration) { lc.m.clock.Advance(d) }

// pastDeadAfter moves the clock a second past A's dead_after (30s) and
// ticks A's controller.
func (lc *lcCluster) pastDeadAfter() {
	lc.advance(31 * time.Second)
	lc.a.tick()
}

// wantOneAlert fails unless A chained exactly one alert for decision id,
// its reason containing want.
func (lc *lcCluster) wantOneAlert(id, want string) {
	lc.m.t.Helper()
	alerts := lc.a.find(plane.KindAlert, map[string]any{"decision_id": id})
	if len(alerts) != 1 {
		lc.m.t.Fatalf("alerts for %s: %+v, want one (%q)", id, alerts, want)
	}
	if r, _ := alerts[0].Payload["reason"].(string); !strings.Contains(r, want) {
		lc.m.t.Fatalf("alert for %s: %+v, want reason containing %q", id, alerts[0], want)
	}
}

// pl is A's placement of decision id (ok false when A has none).
func (lc *lcCluster) pl(id string) (plane.Placement, bool) {
	for _, p := range lc.a.ctrl().Placements() {
		if p.DecisionID == id {
			return p, true
		}
	}
	return plane.Placement{}, false
}

// mustPl is A's placement of decision id.
func (lc *lcCluster) mustPl(id string) plane.Placement {
	lc.m.t.Helper()
	p, ok := lc.pl(id)
	if !ok {
		lc.m.t.Fatalf("A has no placement %s: %+v", id, lc.a.ctrl().Placements())
	}
	return p
}

// others is A's placements but decision id.
func (lc *lcCluster) others(id string) []plane.Placement {
	var out []plane.Placement
	for _, p := range lc.a.ctrl().Placements() {
		if p.DecisionID != id {
			out = append(out, p)
		}
	}
	return out
}

// lcHeld lists the instances mn's own host holds, with its departed ones
// (ctl status self --departed on its operator socket).
func (mn *mnode) lcHeld() ctl.StatusList {
	mn.m.t.Helper()
	var st ctl.StatusList
	ctlJSON(mn.m.t, mn.socket(), &st, "status", "--departed", "self")
	return st
}

// lcRunning lists the ids of the instances mn's host holds running.
func (mn *mnode) lcRunning() []string {
	mn.m.t.Helper()
	var out []string
	for _, in := range mn.lcHeld().Instances {
		if in.Lifecycle == ctl.StateRunning {
			out = append(out, in.InstanceID)
		}
	}
	return out
}

// lcCopies counts the instances named iid held by the running nodes
// among ns.
func lcCopies(iid string, ns ...*mnode) int {
	n := 0
	for _, mn := range ns {
		if mn == nil || mn.n == nil {
			continue
		}
		for _, in := range mn.lcHeld().Instances {
			if in.InstanceID == iid {
				n++
			}
		}
	}
	return n
}

// lcSeq is the number of entries in mn's chain: entries after it are
// what happened since.
func (mn *mnode) lcSeq() int { return len(mn.entries()) }

// lcSince is mn's chain entries from index from on, of source src ("" any).
func (mn *mnode) lcSince(from int, src string) []chainEntry {
	var out []chainEntry
	for _, e := range mn.entries()[from:] {
		if src == "" || e.Source == src {
			out = append(out, e)
		}
	}
	return out
}

// lcKinds renders entries as "kind(reason)" for failure messages.
func lcKinds(es []chainEntry) string {
	var b []string
	for _, e := range es {
		b = append(b, fmt.Sprintf("%s(%v)", e.Kind, e.Payload["reason"]))
	}
	return strings.Join(b, " ")
}

// lcWaitUnlinked waits until mn's mesh no longer has a link to id (the
// liveness timeout of a cut link), so that calls to id fail at once
// instead of running into their timeouts.
func (mn *mnode) lcWaitUnlinked(id string) {
	mn.m.t.Helper()
	waitFor(mn.m.t, mn.name+" to lose its link to "+id, func() bool {
		return !slices.ContainsFunc(mn.n.mesh.LinkedPeers(), func(p mesh.PeerInfo) bool { return p.ID == id })
	})
}

// lcWaitLinked waits until mn's mesh has a link to id.
func (mn *mnode) lcWaitLinked(id string) {
	mn.m.t.Helper()
	waitFor(mn.m.t, mn.name+" to link to "+id, func() bool {
		return slices.ContainsFunc(mn.n.mesh.LinkedPeers(), func(p mesh.PeerInfo) bool { return p.ID == id })
	})
}

// lcLifecycle is the plane.lifecycle entries of decision id moving to to.
func (mn *mnode) lcLifecycle(id, to string) []chainEntry {
	return mn.find(plane.KindLifecycle, map[string]any{"decision_id": id, "to": to})
}

// tickUntil ticks A, first advancing the clock by step, until cond holds
// (within waitTimeout of real time). A step past the backoff lets a call
// that failed on a link still settling (a node that just restarted) be
// retried rather than waited for.
func (lc *lcCluster) tickUntil(what string, step time.Duration, cond func() bool) {
	t := lc.m.t
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	poll := time.NewTicker(50 * time.Millisecond) // waitFor's poll period
	defer poll.Stop()
	for {
		lc.advance(step)
		lc.a.tick()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			a := lc.a
			es := a.entries()
			t.Fatalf("timed out waiting for %s\nplacements: %+v\nnodes: %+v\nA's last entries: %s", what,
				a.ctrl().Placements(), a.ctrl().NodeViews(), lcKinds(es[max(0, len(es)-12):]))
		}
		<-poll.C
	}
}
