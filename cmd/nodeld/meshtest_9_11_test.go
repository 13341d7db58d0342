package main

// Acceptance list 9.11 (revocation) of the controller, each item its own
// test on real in-process nodes over QUIC on loopback (the meshtest
// harness). Revocations are made as an operator makes them: nodeld
// package revoke|unrevoke --config NODE.yaml [--mesh], which asks the
// running node over its operator socket; --mesh signs a notice with the
// node's key and gossips it to linked peers, whose hosts apply notices of
// their controllers' keys and replay their log to peers that link up.
//
// nodeld's counterparts of the reference's terms: the forced stop and
// unload of a revoked instance is one host.revoked.teardown record (its
// subject, unloaded true) and the instance is listed departed "revoked";
// there are no stop/unload permits, so "needs no permit" is a teardown
// that nobody asked for over the wire (TestMeshtest_9_11_ForcedUnloadNeedsNoPermit).
//
// Items of 9.11 not tested here, and why:
//   - "unverified peers get none": the mesh links only peers whose key
//     is pinned (or pinned on first contact); there is no link to an
//     unverified peer for a replay to go over, so nothing to test over the
//     wire beyond the mesh's own admission tests.
//
// A replay paces its notices NoticeReplayPace apart; the harness steps
// it instead (mnode.setReplayWait, testHooks.host), so that a peer
// can leave in the middle of one (TestMeshtest_9_11_ReplayStopsWhenPeerLeaves).
// The replay log in nodeld refuses a line that is not base64 (the node
// does not start, with an error naming the line); a line that decodes
// but does not verify, garbage included, is dropped
// (TestMeshtest_9_11_ReplayLogSurvivesRestart).

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
)

// lcRevoke revokes (verb revoke) or lifts (unrevoke) a subject on mn
// through its running daemon, gossiping the notice with viaMesh.
func (mn *mnode) lcRevoke(verb, kind, value string, viaMesh bool) {
	t := mn.m.t
	t.Helper()
	args := []string{"package", verb, "--config", mn.cfgPath, "--kind", kind, value}
	if verb == "revoke" {
		args = append(args, "--reason", "test "+kind)
	}
	if viaMesh {
		args = append(args, "--mesh")
	}
	// In-process, as ctl is: the CLI's code on the node's socket.
	var outb, errb bytes.Buffer
	rc := exitCode(cmdRevocations(verb, args[2:], &outb, &errb), &errb)
	out, errOut := outb.String(), errb.String()
	if rc != 0 {
		t.Fatalf("%v = %d\n%s\n%s", args, rc, out, errOut)
	}
}

// lcReplayMetric is mn's nodeld_host_notice_replays_total of result.
func (mn *mnode) lcReplayMetric(result string) int {
	t := mn.m.t
	t.Helper()
	code, body := httpGet(t, "http://"+mn.n.admin.Addr().String()+"/metrics")
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	m := regexp.MustCompile(`(?m)^nodeld_host_notice_replays_total\{result="` + result + `"\} (\d+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no nodeld_host_notice_replays_total{result=%q}", result)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// lcTeardowns is mn's host.revoked.teardown records of instance iid.
func (mn *mnode) lcTeardowns(iid string) []chainEntry {
	return mn.find(host.KindRevokedTeardown, map[string]any{"instance_id": iid})
}

// lcWaitTeardown waits for mn's host to tear down instance iid.
func (mn *mnode) lcWaitTeardown(iid string) chainEntry {
	mn.m.t.Helper()
	waitFor(mn.m.t, mn.name+" to tear down "+iid, func() bool { return len(mn.lcTeardowns(iid)) > 0 })
	return mn.lcTeardowns(iid)[0]
}

// lcNoticeMetric is mn's nodeld_host_notices_total of result.
func (mn *mnode) lcNoticeMetric(result string) int {
	t := mn.m.t
	t.Helper()
	code, body := httpGet(t, "http://"+mn.n.admin.Addr().String()+"/metrics")
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	m := regexp.MustCompile(`(?m)^nodeld_host_notices_total\{result="` + result + `"\} (\d+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestMeshtest_9_11_ForcedTeardown: for a package id, a signer key and an
// artifact (the manifest hash), in turn, on B's own list: a sweep with
// nothing of the instance revoked (an unrelated revocation triggers one)
// tears nothing down; the revocation tears the instance down exactly
// once (host.revoked.teardown naming the subject's kind and value,
// unloaded true; B lists it departed "revoked"); status through A then
// fails; A's next tick forgets the placement ("no longer on its node:
// revoked"); a further sweep is a no-op. The revocation is lifted before
// the next round, which places the package again.
func TestMeshtest_9_11_ForcedTeardown(t *testing.T) {
	t.Parallel()
	unrelated := func(kind string, i int) string {
		if kind == pkg.SubjectPackage {
			return fmt.Sprintf("unrelated-%d", i)
		}
		return fmt.Sprintf("%064x", i+1)
	}
	lc := newLC(t, lcOpts{twoNodes: true})
	a, b := lc.a, lc.b
	for i, kind := range []string{pkg.SubjectPackage, pkg.SubjectSigner, pkg.SubjectArtifact} {
		res := lc.place(lc.idB)
		dec, iid := res.DecisionID, res.InstanceID
		a.tick()
		value := map[string]string{pkg.SubjectPackage: "echo-llm", pkg.SubjectSigner: lc.anchor,
			pkg.SubjectArtifact: lc.mustPl(dec).ManifestHash}[kind]

		// The instance id is the same each round: count this round's.
		prior := len(b.lcTeardowns(iid))
		b.lcRevoke("revoke", kind, unrelated(kind, i), false)
		if got := b.lcTeardowns(iid); len(got) != prior || len(b.lcRunning()) != 1 {
			t.Fatalf("%s: an unrelated sweep tore down %+v", kind, got[prior:])
		}
		b.lcRevoke("revoke", kind, value, false)
		waitFor(t, kind+": the teardown", func() bool { return len(b.lcTeardowns(iid)) > prior })
		e := b.lcTeardowns(iid)[prior]
		if want := (pkg.Subject{Kind: kind, Value: value}).String(); e.Payload["unloaded"] != true || e.Payload["subject"] != want {
			t.Fatalf("%s: teardown %+v", kind, e.Payload)
		}
		held := b.lcHeld()
		if len(held.Instances) != 0 || len(held.Departed) != 1 || held.Departed[0].Reason != "revoked" {
			t.Fatalf("%s: B holds %+v", kind, held)
		}
		if _, _, rc := runCtl(t, "--socket", a.socket(), "status", "b", iid); rc == 0 {
			t.Fatalf("%s: status of the torn down instance succeeded", kind)
		}
		a.tick()
		if _, still := lc.pl(dec); still {
			t.Fatalf("%s: A kept %+v", kind, lc.mustPl(dec))
		}
		if got := a.lcLifecycle(dec, "unloaded"); len(got) != 1 || got[0].Payload["reason"] != "no longer on its node: revoked" {
			t.Fatalf("%s: A's records %+v", kind, a.find(plane.KindLifecycle, map[string]any{"decision_id": dec}))
		}
		b.lcRevoke("revoke", kind, unrelated(kind, 10+i), false)
		if got := b.lcTeardowns(iid); len(got) != prior+1 {
			t.Fatalf("%s: a second sweep: %+v", kind, got[prior:])
		}
		b.lcRevoke("unrevoke", kind, value, false)
	}
}

// TestMeshtest_9_11_UnrelatedRevocationsLeaveRunning: another package,
// another signer and another artifact revoked on B, and gossiped by A,
// leave B's instance running and A's placement placed.
func TestMeshtest_9_11_UnrelatedRevocationsLeaveRunning(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{twoNodes: true})
	a, b := lc.a, lc.b
	res := lc.place(lc.idB)
	other := strings.Repeat("ab", 32)
	for _, s := range [][2]string{{pkg.SubjectPackage, "other-pkg"}, {pkg.SubjectSigner, other}, {pkg.SubjectArtifact, other}} {
		b.lcRevoke("revoke", s[0], s[1], false)
	}
	a.lcRevoke("revoke", pkg.SubjectPackage, "other-by-notice", true)
	waitFor(t, "B to apply A's notice", func() bool {
		return len(b.find(host.KindNoticeApplied, map[string]any{"from": a.n.id.ID()})) == 1
	})
	a.tick()
	if got := b.lcRunning(); len(got) != 1 || got[0] != res.InstanceID || len(b.lcTeardowns(res.InstanceID)) != 0 {
		t.Fatalf("B runs %v, teardowns %+v", got, b.lcTeardowns(res.InstanceID))
	}
	if p := lc.mustPl(res.DecisionID); p.Life != plane.LifePlaced || p.HostState != "running" {
		t.Fatalf("A's placement: %+v", p)
	}
}

// TestMeshtest_9_11_ForcedUnloadNeedsNoPermit: B's own operator may not
// unload the instance A placed (B is not among its host's controllers:
// unauthorized), and A, the controller, is down; the revocation on B
// tears the instance down all the same.
func TestMeshtest_9_11_ForcedUnloadNeedsNoPermit(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{twoNodes: true})
	b := lc.b
	res := lc.place(lc.idB)
	lc.a.kill()
	out, errOut, rc := runCtl(t, "--socket", b.socket(), "unload", "self", res.InstanceID)
	if rc == 0 || !strings.Contains(errOut, "unauthorized") {
		t.Fatalf("B's operator unload = %d\n%s\n%s", rc, out, errOut)
	}
	b.lcRevoke("revoke", pkg.SubjectPackage, "echo-llm", false)
	if e := b.lcWaitTeardown(res.InstanceID); e.Payload["unloaded"] != true {
		t.Fatalf("teardown %+v", e.Payload)
	}
	if held := b.lcHeld(); len(held.Instances) != 0 {
		t.Fatalf("B holds %+v", held.Instances)
	}
}

// TestMeshtest_9_11_RevokedNotPlacedButTornDown: the package is revoked
// on A, the controller. Placing it is refused (the error says it "is
// revoked: <reason>"; A chains plane.refuse with the revoked subject) and
// nothing is placed: nodeld refuses the package before the engine runs,
// so there is no decision to explain, where the reference explains an
// unplaceable one; the instance placed before the revocation can still
// be stopped through A, and unloaded, but not started again (refused
// governance, "is revoked", chained plane.refuse phase start with the
// subject), though B's own list does not revoke it.
func TestMeshtest_9_11_RevokedNotPlacedButTornDown(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{twoNodes: true})
	a := lc.a
	res := lc.place(lc.idB)
	a.lcRevoke("revoke", pkg.SubjectPackage, "echo-llm", false)

	out, rc, errOut := a.placeJSON(lc.pkgDir)
	if rc == 0 || !strings.Contains(errOut, "is revoked: test package") {
		t.Fatalf("place of a revoked package = %d %+v\n%s", rc, out, errOut)
	}
	refused := a.find(plane.KindRefuse, map[string]any{"phase": "place"})
	if len(refused) != 1 || fmt.Sprint(refused[0].Payload["revoked"]) == "<nil>" ||
		refused[0].Payload["revoked"].(map[string]any)["value"] != "echo-llm" {
		t.Fatalf("A's refusals: %+v", refused)
	}
	if ps := a.ctrl().Placements(); len(ps) != 1 {
		t.Fatalf("placements: %+v", ps)
	}
	a.ctlOK("stop", "b", res.InstanceID)
	out2, errOut2, rc2 := runCtl(t, "--socket", a.socket(), "start", "b", res.InstanceID)
	if rc2 == 0 || !strings.Contains(errOut2, "governance") || !strings.Contains(errOut2, "is revoked: test package") {
		t.Fatalf("start of a revoked instance = %d\n%s\n%s", rc2, out2, errOut2)
	}
	started := a.find(plane.KindRefuse, map[string]any{"phase": "start", "instance_id": res.InstanceID})
	if len(started) != 1 || fmt.Sprint(started[0].Payload["revoked"]) == "<nil>" {
		t.Fatalf("A's start refusals: %+v", started)
	}
	if got := lc.b.lcHeld().Instances; len(got) != 1 || got[0].Lifecycle != "stopped" {
		t.Fatalf("B holds %+v after the refused start", got)
	}
	a.ctlOK("unload", "b", res.InstanceID)
	if ps, held := a.ctrl().Placements(), lc.b.lcHeld(); len(ps) != 0 || len(held.Instances) != 0 {
		t.Fatalf("after stop and unload: placements %+v, B holds %+v", ps, held.Instances)
	}
}

// TestMeshtest_9_11_GossipOnlineNodeUnloads: A revokes the package with a
// notice (--mesh); B, linked, applies it (host.notice.applied from A) and
// tears its instance down; A's next tick forgets the placement.
func TestMeshtest_9_11_GossipOnlineNodeUnloads(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{twoNodes: true})
	a, b := lc.a, lc.b
	res := lc.place(lc.idB)
	a.lcRevoke("revoke", pkg.SubjectPackage, "echo-llm", true)
	b.lcWaitTeardown(res.InstanceID)
	// The sweep the notice starts may chain before the notice does.
	waitFor(t, "B to chain A's notice", func() bool {
		return len(b.find(host.KindNoticeApplied, map[string]any{"from": a.n.id.ID(), "action": pkg.NoticeRevoke})) == 1
	})
	a.tick()
	if ps := a.ctrl().Placements(); len(ps) != 0 {
		t.Fatalf("A kept %+v", ps)
	}
}

// TestMeshtest_9_11_GossipOfflineNodeReplayed: B is cut off the mesh when
// A revokes the package with a notice, so the notice does not reach it
// and its instance keeps running. When B's link comes back, A replays its
// log: B applies the notice and tears the instance down (chained).
func TestMeshtest_9_11_GossipOfflineNodeReplayed(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{twoNodes: true})
	a, b := lc.a, lc.b
	res := lc.place(lc.idB)
	lc.m.cut("b")
	a.lcWaitUnlinked(lc.idB)
	a.lcRevoke("revoke", pkg.SubjectPackage, "echo-llm", true)
	if got := b.lcRunning(); len(got) != 1 || len(b.find(host.KindNoticeApplied, nil)) != 0 {
		t.Fatalf("cut off B: runs %v, notices %+v", got, b.find(host.KindNoticeApplied, nil))
	}
	lc.m.heal("b")
	e := b.lcWaitTeardown(res.InstanceID)
	// The sweep the notice starts may chain before the notice does.
	waitFor(t, "B to chain A's notice", func() bool {
		return len(b.find(host.KindNoticeApplied, map[string]any{"from": a.n.id.ID()})) == 1
	})
	if e.Payload["unloaded"] != true {
		t.Fatalf("teardown %+v", e.Payload)
	}
}

// TestMeshtest_9_11_ReplayLogSurvivesRestart: A's notice log holds the
// notice it sent (mode 0600). A line of garbage (base64 of bytes that are
// no notice) and a notice signed by a stranger's key are added to it; A
// restarts, drops both and keeps its own. C, which never saw the notice
// (it starts only now), gets it replayed from the restarted A (B, which
// holds it too, is down by then).
func TestMeshtest_9_11_ReplayLogSurvivesRestart(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{noC: true})
	a := lc.a
	a.lcRevoke("revoke", pkg.SubjectPackage, "echo-llm", true)
	path := filepath.Join(a.dataDir, host.NoticesFile)
	waitFor(t, "B to apply the notice", func() bool { return len(lc.b.find(host.KindNoticeApplied, nil)) == 1 })
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("notice log: %v %v", fi, err)
	}
	own, err := os.ReadFile(path)
	if err != nil || strings.Count(string(own), "\n") != 1 {
		t.Fatalf("notice log %q: %v", own, err)
	}
	_, stranger, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	alien, err := pkg.SignNotice(stranger, pkg.Notice{Seq: 1, IssuedAt: lc.m.clock.Now(), Action: pkg.NoticeRevoke,
		Subject: pkg.Subject{Kind: pkg.SubjectPackage, Value: "alien"}})
	if err != nil {
		t.Fatal(err)
	}
	log := string(own) + base64.StdEncoding.EncodeToString([]byte("no notice at all")) + "\n" + base64.StdEncoding.EncodeToString(alien) + "\n"
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}

	// B holds the notice too and would replay it to C: only A may.
	lc.b.kill()
	a.restart()
	kept, err := os.ReadFile(path)
	if err != nil || string(kept) != string(own) {
		t.Fatalf("log after the restart %q, want only %q (%v)", kept, own, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("notice log after the restart: %v %v", fi, err)
	}
	lc.startC()
	waitFor(t, "C to get the notice replayed", func() bool {
		return len(lc.c.find(host.KindNoticeApplied, map[string]any{"from": a.n.id.ID()})) == 1
	})
	if got := lc.c.find(host.KindNoticeApplied, nil); len(got) != 1 {
		t.Fatalf("C's notices: %+v", got)
	}
}

// TestMeshtest_9_11_RepeatedRecoveriesOneReplay: B's link to A drops and
// comes back within the replay cooldown: A does not replay again (B
// counts no stale notice). After the cooldown, the next recovery replays
// once more (B counts one stale notice: it holds it already). Only A
// dials (B's address for A is one nobody answers at), as in
// TestMeshtest_9_11_ReplayStopsWhenPeerLeaves: when both dial, a return
// can bring up a link each way, each replaying (B counted two stale
// notices under load).
func TestMeshtest_9_11_RepeatedRecoveriesOneReplay(t *testing.T) {
	t.Parallel()
	_, anchor := meshEchoPackage(t)
	m := newMesh(t, "a", "b")
	idB := m.id("b")
	cfgB := m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor))
	cfgB = strings.Replace(cfgB, m.node("a").relay.Addr(), freeUDPAddr(t), 1)
	b := m.start("b", cfgB)
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, ""))
	a.lcWaitLinked(idB)
	m.cut("b")
	a.lcWaitUnlinked(idB)
	a.lcRevoke("revoke", pkg.SubjectPackage, "echo-llm", true)
	m.heal("b")
	// Complete on A, not only applied on B: B applies the notice before A
	// reads the end of its stream, and a cut in between stops the replay
	// (no cooldown then: the return inside it would replay again).
	waitFor(t, "the first replay", func() bool {
		return b.lcNoticeMetric("applied") == 1 && a.lcReplayMetric("complete") == 1
	})

	flap := func() {
		m.cut("b")
		a.lcWaitUnlinked(idB)
		m.heal("b")
		a.lcWaitLinked(idB)
	}
	flap() // inside the cooldown
	m.clock.Advance(host.NoticeReplayCooldown + time.Second)
	flap()
	waitFor(t, "the replay after the cooldown", func() bool {
		return b.lcNoticeMetric("stale") >= 1 && a.lcReplayMetric("complete") >= 2
	})
	if n, s := b.lcNoticeMetric("applied"), b.lcNoticeMetric("stale"); n != 1 || s != 1 {
		t.Fatalf("B's notices: applied %d, stale %d; want 1 and 1 (one replay per cooldown)", n, s)
	}
}

// replayStep is one pause of a replay the test steps: the replay's
// (link's) context, how many notices it sent, and the channel that lets
// it go on.
type replayStep struct {
	ctx     context.Context
	sent    int
	release chan struct{}
}

// TestMeshtest_9_11_ReplayStopsWhenPeerLeaves: A's log holds three
// notices B missed while cut off. B returns and A replays them, the test
// stepping each pause: after the first notice (B applied it), B's link
// goes (cut) in the pause and the replay's link context ends. B returns
// on a new link before the old replay goes on: A replays the whole log on
// the new one (the old replay was cut short, so no cooldown holds it
// back). The old replay, let go on, sends nothing more: it stops
// (nodeld_host_notice_replays_total stopped 1), B counts one notice
// applied and one stale (the new replay's first), and the old replay
// pauses no more. The new replay then sends the rest: B applies all
// three, one stale in all, and the replay completes. (B's config gives A's
// address as one nobody answers at, so only A dials: one link per return,
// one replay each.)
func TestMeshtest_9_11_ReplayStopsWhenPeerLeaves(t *testing.T) {
	t.Parallel()
	_, anchor := meshEchoPackage(t)
	m := newMesh(t, "a", "b")
	idB := m.id("b")
	cfgB := m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor))
	cfgB = strings.Replace(cfgB, m.node("a").relay.Addr(), freeUDPAddr(t), 1)
	b := m.start("b", cfgB)
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, ""))
	a.lcWaitLinked(idB)

	steps := make(chan replayStep, 16)
	stop := make(chan struct{})
	// The pause ignores the context on purpose: what stops the replay
	// must be the host's own check of its link.
	a.setReplayWait(func(ctx context.Context, peerID string, sent int) error {
		st := replayStep{ctx: ctx, sent: sent, release: make(chan struct{})}
		steps <- st
		select {
		case <-st.release:
		case <-stop:
		}
		return nil
	})
	t.Cleanup(func() { close(stop) }) // before the nodes stop
	next := func(what string) replayStep {
		t.Helper()
		select {
		case st := <-steps:
			return st
		case <-time.After(waitTimeout):
			t.Fatalf("timed out waiting for %s", what)
			return replayStep{}
		}
	}
	notices := func(wantApplied, wantStale int) {
		t.Helper()
		if n, s := b.lcNoticeMetric("applied"), b.lcNoticeMetric("stale"); n != wantApplied || s != wantStale {
			t.Fatalf("B's notices: applied %d, stale %d; want %d and %d", n, s, wantApplied, wantStale)
		}
	}

	m.cut("b")
	a.lcWaitUnlinked(idB)
	for _, p := range []string{"gone-1", "gone-2", "gone-3"} {
		a.lcRevoke("revoke", pkg.SubjectPackage, p, true)
	}
	if log, err := os.ReadFile(filepath.Join(a.dataDir, host.NoticesFile)); err != nil || strings.Count(string(log), "\n") != 3 {
		t.Fatalf("A's log %q: %v", log, err)
	}

	// B returns: the first notice, then the first pause.
	m.heal("b")
	old := next("the first pause of the replay")
	if old.sent != 1 || old.ctx.Err() != nil {
		t.Fatalf("first pause after %d notices (link context: %v)", old.sent, old.ctx.Err())
	}
	notices(1, 0)

	// B leaves in the pause: the replay's link context ends.
	m.cut("b")
	a.lcWaitUnlinked(idB)
	waitFor(t, "the old replay's link context to end", func() bool { return old.ctx.Err() != nil })

	// B returns on a new link while the old replay still pauses: the new
	// link replays the whole log (its first notice is stale on B).
	m.heal("b")
	a.lcWaitLinked(idB)
	nu := next("the first pause of the new replay")
	if nu.ctx == old.ctx || nu.sent != 1 || nu.ctx.Err() != nil {
		t.Fatalf("new replay's first pause: after %d notices, same context %v, link context %v", nu.sent, nu.ctx == old.ctx, nu.ctx.Err())
	}
	notices(1, 1)

	// The old replay goes on: it stops, sending nothing on the new link.
	close(old.release)
	waitFor(t, "the old replay to stop", func() bool { return a.lcReplayMetric("stopped") == 1 })
	select {
	case st := <-steps:
		t.Fatalf("a pause after the old replay stopped: after %d notices (old link: %v)", st.sent, st.ctx == old.ctx)
	default:
	}
	notices(1, 1)
	if n := a.lcReplayMetric("complete"); n != 0 {
		t.Fatalf("%d replays complete, want none yet", n)
	}

	// The new replay sends the rest.
	close(nu.release)
	st := next("the second pause of the new replay")
	if st.ctx != nu.ctx || st.sent != 2 {
		t.Fatalf("second pause: after %d notices, new replay %v", st.sent, st.ctx == nu.ctx)
	}
	notices(2, 1)
	close(st.release)
	waitFor(t, "the new replay to complete", func() bool { return a.lcReplayMetric("complete") == 1 })
	notices(3, 1)
	if n := a.lcReplayMetric("stopped"); n != 1 {
		t.Fatalf("%d replays stopped, want 1", n)
	}
	select {
	case st := <-steps:
		t.Fatalf("a pause after the last notice: after %d notices", st.sent)
	default:
	}
}

// TestMeshtest_9_11_LiftedRevocationNotReSpread: while B is cut off, A
// revokes the package with a notice and lifts it again. A's log keeps
// only the lift; B, back, gets only that: its instance keeps running, it
// tears nothing down, and nothing of the package is revoked on it.
func TestMeshtest_9_11_LiftedRevocationNotReSpread(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{twoNodes: true})
	a, b := lc.a, lc.b
	res := lc.place(lc.idB)
	lc.m.cut("b")
	a.lcWaitUnlinked(lc.idB)
	a.lcRevoke("revoke", pkg.SubjectPackage, "echo-llm", true)
	a.lcRevoke("unrevoke", pkg.SubjectPackage, "echo-llm", true)
	if log, err := os.ReadFile(filepath.Join(a.dataDir, host.NoticesFile)); err != nil || strings.Count(string(log), "\n") != 1 {
		t.Fatalf("A's log %q: %v", log, err)
	}
	lc.m.heal("b")
	waitFor(t, "B to get the lift replayed", func() bool {
		return len(b.find(host.KindNoticeApplied, map[string]any{"action": pkg.NoticeUnrevoke})) == 1
	})
	if got := b.find(host.KindNoticeApplied, nil); len(got) != 1 {
		t.Fatalf("B's notices: %+v", got)
	}
	var outb, errb bytes.Buffer
	rc := exitCode(cmdRevocations("revocations", []string{"--config", b.cfgPath}, &outb, &errb), &errb)
	out := outb.String()
	if rc != 0 || strings.Contains(out, "echo-llm") {
		t.Fatalf("B's revocations = %d %q", rc, out)
	}
	if got := b.lcRunning(); len(got) != 1 || got[0] != res.InstanceID || len(b.lcTeardowns(res.InstanceID)) != 0 {
		t.Fatalf("B runs %v", got)
	}
}

// TestMeshtest_9_11_Scripted: place on B; kill B; rescheduled on C;
// revoke the package with a notice from A: C tears its copy down and A
// forgets it; B returns without its old copy (orphan unloaded); placing
// the package again is refused.
func TestMeshtest_9_11_Scripted(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{})
	a := lc.a
	res := lc.place(lc.idB, "--prefer", "b")
	a.tick()
	lc.b.kill()
	a.tick()
	lc.pastDeadAfter()
	nu := lc.others(res.DecisionID)
	if len(nu) != 1 || nu[0].Node != lc.idC {
		t.Fatalf("not rescheduled: %+v", a.ctrl().Placements())
	}
	a.lcRevoke("revoke", pkg.SubjectPackage, "echo-llm", true)
	lc.c.lcWaitTeardown(nu[0].InstanceID)
	a.tick()
	if _, still := lc.pl(nu[0].DecisionID); still {
		t.Fatalf("A kept the revoked copy: %+v", a.ctrl().Placements())
	}
	lc.b.run()
	lc.tickUntil("B's old copy settled", 11*time.Second, func() bool {
		return len(a.ctrl().Placements()) == 0
	})
	if _, rc, errOut := a.placeJSON(lc.pkgDir); rc == 0 || !strings.Contains(errOut, "is revoked") {
		t.Fatalf("place after the revocation = %d\n%s", rc, errOut)
	}
	if n := len(lc.b.lcHeld().Instances) + len(lc.c.lcHeld().Instances); n != 0 {
		t.Fatalf("%d instances left", n)
	}
}
