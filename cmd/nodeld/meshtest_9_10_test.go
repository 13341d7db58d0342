package main

// Acceptance list 9.10 (controller lifecycle) of the controller, each
// item its own test on real in-process nodes over QUIC on loopback (the
// meshtest harness): A runs the controller, B and C are hosts, one fake
// clock drives dead_after and the backoffs, and every assertion reads
// what the wire and the chain files show.
//
// nodeld's counterparts of the reference's terms: a node is unreachable
// when A's describe of it fails in a tick (its link is down, or it does
// not answer), and dead after dead_after of that; membership is the mesh
// link (up or down) and a verified describe; "Unverified" is a node whose
// describe has not verified yet, or whose tier does not admit the kind.
// A node is taken down either by killing it (its host stops its
// instances, so it returns without them) or by cutting it off the mesh
// (its instances keep running, as behind a pulled cable).
//
// Items of 9.10 with no nodeld counterpart, not tested here:
//   - "Operator non-migratable -> lost, alert (non-migratable)": nodeld
//     has no per-placement migratable policy; an operator keeps an
//     instance on its node by pinning it (NODE argument of ctl place),
//     which TestMeshtest_9_10_PinnedAlertsThenRecovers covers.
//   - "Adopted instance without an order -> alert (no stored placement
//     order)": every nodeld placement carries the order it came from,
//     adopted ones (a settled lost answer) included, so an adopted
//     instance moves like any other; the blocker exists in the code
//     (plane.reschedule) but no path reaches it.
//   - Membership states (Unreachable, Unverified, Active) as a separate
//     service: mapped as said above (TestMeshtest_9_10_FallbackUnverified).
//
// "Refused orphan unload backs off" needs a host that refuses an unload of
// an instance it holds: a real host does so only when stopping the
// process fails (it survives SIGKILL), which the harness arranges with
// the host's stop hook (mnode.setStopFault, testHooks.host).

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/plane"
)

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// placeTicked places as place does and ticks A's controller (its mirror
// then has the instance running): it returns the decision and instance.
func (lc *lcCluster) placeTicked(want string, args ...string) (dec, iid string) {
	lc.m.t.Helper()
	res := lc.place(want, args...)
	lc.a.tick()
	return res.DecisionID, res.InstanceID
}

// cutBMovedToC cuts B off the mesh with the instance of decision dec
// and passes dead_after: the instance must be rescheduled on C. It
// returns A's other placements (the one on C).
func (lc *lcCluster) cutBMovedToC(dec string) []plane.Placement {
	t, a := lc.m.t, lc.a
	t.Helper()
	lc.m.cut("b")
	a.lcWaitUnlinked(lc.idB)
	a.tick()
	lc.pastDeadAfter()
	nu := lc.others(dec)
	if len(nu) != 1 || nu[0].Node != lc.idC || lc.mustPl(dec).Life != plane.LifeRescheduled {
		t.Fatalf("not rescheduled on C: %+v", a.ctrl().Placements())
	}
	return nu
}

// wantOrphanUnloaded fails unless B's replaced copy iid of decision dec
// was unloaded as an orphan (chained; B lists it departed, unloaded) and
// the workload runs once, on C, as nu.
func (lc *lcCluster) wantOrphanUnloaded(dec, iid string, nu plane.Placement) {
	t, a := lc.m.t, lc.a
	t.Helper()
	if got := a.find(plane.KindOrphan, map[string]any{"decision_id": dec, "instance_id": iid}); len(got) != 1 ||
		got[0].Payload["reason"] != "orphan unloaded" || got[0].Payload["node"] != lc.idB {
		t.Fatalf("orphan records: %+v", got)
	}
	held := lc.b.lcHeld()
	if len(held.Instances) != 0 || len(held.Departed) != 1 || held.Departed[0].InstanceID != iid || held.Departed[0].Reason != "unloaded" {
		t.Fatalf("B holds %+v", held)
	}
	if got := lc.c.lcRunning(); len(got) != 1 || got[0] != nu.InstanceID || len(a.ctrl().Placements()) != 1 {
		t.Fatalf("C runs %v; placements %+v", got, a.ctrl().Placements())
	}
}

// wantLostInPlace fails (saying what) unless decision dec is lost and
// not moved, with one alert whose reason contains alert, and the node
// other (named name) holds no instance.
func (lc *lcCluster) wantLostInPlace(what, dec, alert, name string, other *mnode) {
	t := lc.m.t
	t.Helper()
	if p := lc.mustPl(dec); p.Life != plane.LifeLost || len(lc.others(dec)) != 0 {
		t.Fatalf("%s: %+v, others %+v", what, p, lc.others(dec))
	}
	lc.wantOneAlert(dec, alert)
	if got := other.lcHeld().Instances; len(got) != 0 {
		t.Fatalf("%s holds %+v", name, got)
	}
}

// TestMeshtest_9_10_DeadNodeRescheduled: B, hosting the instance, is
// killed. The first tick finds it unreachable and does nothing (not
// dead); after dead_after the instance is lost ("node is dead") and
// rescheduled on C, where it runs; the old placement is rescheduled; A
// chains lost, rescheduled and one migrate (from B to C, reason
// node_dead, a 64-hex decision id). Further ticks while B stays down
// chain nothing and place nothing.
func TestMeshtest_9_10_DeadNodeRescheduled(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{})
	a := lc.a
	dec, iid := lc.placeTicked(lc.idB, "--prefer", "b") // mirror: running

	lc.b.kill()
	before := a.lcSeq()
	a.tick()
	if p := lc.mustPl(dec); p.Life != plane.LifePlaced || len(lc.others(dec)) != 0 {
		t.Fatalf("after the first tick without B: %+v, others %+v", p, lc.others(dec))
	}
	if got := a.lcSince(before, plane.ChainSource); len(got) != 0 {
		t.Fatalf("the first tick without B chained %s", lcKinds(got))
	}

	lc.pastDeadAfter()
	old := lc.mustPl(dec)
	nu := lc.others(dec)
	if old.Life != plane.LifeRescheduled || len(nu) != 1 || nu[0].Node != lc.idC || nu[0].Life != plane.LifePlaced {
		t.Fatalf("after dead_after: old %+v, new %+v", old, nu)
	}
	if got := lc.c.lcRunning(); len(got) != 1 || got[0] != nu[0].InstanceID {
		t.Fatalf("C runs %v, want %s", got, nu[0].InstanceID)
	}
	if got := a.lcLifecycle(dec, string(plane.LifeLost)); len(got) != 1 || got[0].Payload["reason"] != "node is dead" {
		t.Fatalf("lost records: %+v", got)
	}
	if got := a.lcLifecycle(dec, string(plane.LifeRescheduled)); len(got) != 1 {
		t.Fatalf("rescheduled records: %+v", got)
	}
	mig := a.find(plane.KindMigrate, nil)
	if len(mig) != 1 {
		t.Fatalf("migrate records: %+v", mig)
	}
	mp := mig[0].Payload
	if mp["from_node"] != lc.idB || mp["to_node"] != lc.idC || mp["reason"] != "node_dead" ||
		mp["from_instance"] != iid || mp["to_instance"] != nu[0].InstanceID ||
		!hex64.MatchString(mp["decision_id"].(string)) || mp["decision_id"] != nu[0].DecisionID {
		t.Fatalf("migrate: %+v", mp)
	}

	// Nothing more while B stays down.
	before = a.lcSeq()
	for range 3 {
		lc.pastDeadAfter()
	}
	if got := a.lcSince(before, plane.ChainSource); len(got) != 0 {
		t.Fatalf("ticks with B still down chained %s", lcKinds(got))
	}
	if got := lc.others(dec); len(got) != 1 || strings.Join(lc.c.lcRunning(), ",") != nu[0].InstanceID {
		t.Fatalf("placements %+v, C runs %v", got, lc.c.lcRunning())
	}
}

// TestMeshtest_9_10_OrphanUnloaded: B is cut off the mesh with its
// instance running; after dead_after the instance is rescheduled on C
// while B's copy keeps running behind the partition. When B returns, A
// unloads its replaced copy (plane.orphan "orphan unloaded"), B lists it
// departed (unloaded), and the workload runs once, on C.
func TestMeshtest_9_10_OrphanUnloaded(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{})
	dec, iid := lc.placeTicked(lc.idB, "--prefer", "b")

	nu := lc.cutBMovedToC(dec)
	if got := lc.b.lcRunning(); len(got) != 1 || got[0] != iid {
		t.Fatalf("B behind the partition runs %v, want its copy %s", got, iid)
	}

	lc.m.heal("b")
	lc.tickUntil("the orphan unload on B", 11*time.Second, func() bool {
		_, still := lc.pl(dec)
		return !still
	})
	lc.wantOrphanUnloaded(dec, iid, nu[0])
}

// TestMeshtest_9_10_RefusedOrphanUnloadBacksOff: B is cut off with its
// instance running and the instance moves to C; when B returns, its host
// refuses to unload the replaced copy (stopping the process fails). A's
// orphan unload is refused and chained once (an alert "replaced copy not
// unloaded on the returned node", with B's refusal); inside retry_backoff
// (10 s on the fake clock) A's ticks send no unload and chain nothing;
// after it the unload is tried again, refused again and not chained again
// (the next backoff doubles, 20 s); once B's host can stop the process,
// the next attempt after the backoff unloads the orphan (plane.orphan
// "orphan unloaded", B lists it departed), and the workload runs once,
// on C.
func TestMeshtest_9_10_RefusedOrphanUnloadBacksOff(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{})
	a := lc.a
	dec, iid := lc.placeTicked(lc.idB, "--prefer", "b")

	nu := lc.cutBMovedToC(dec)

	// B's host cannot stop the orphan's process: every unload of it is
	// refused.
	var tries atomic.Int32
	const survived = "process survived SIGKILL (test hook)"
	lc.b.setStopFault(func(id string) error {
		if id != iid {
			return nil
		}
		tries.Add(1)
		return errors.New(survived)
	})
	t.Cleanup(func() { lc.b.setStopFault(nil) }) // before the nodes stop
	notUnloaded := func() []chainEntry {
		var out []chainEntry
		for _, e := range a.find(plane.KindAlert, map[string]any{"decision_id": dec}) {
			if r, _ := e.Payload["reason"].(string); strings.Contains(r, "replaced copy not unloaded on the returned node") {
				out = append(out, e)
			}
		}
		return out
	}

	// B returns: the first attempt, on a clock that stands still.
	lc.m.heal("b")
	a.lcWaitLinked(lc.idB)
	lc.tickUntil("the first orphan unload attempt", 0, func() bool { return tries.Load() > 0 })
	alerts := notUnloaded()
	if n := tries.Load(); n != 1 || len(alerts) != 1 || !strings.Contains(alerts[0].Payload["reason"].(string), survived) ||
		alerts[0].Payload["node"] != lc.idB {
		t.Fatalf("after the refused unload: %d attempts, alerts %+v", n, alerts)
	}
	if p := lc.mustPl(dec); p.Life != plane.LifeRescheduled || p.Attempts != 1 {
		t.Fatalf("the orphan's placement after the refusal: %+v", p)
	}
	if got := lc.b.lcRunning(); len(got) != 1 || got[0] != iid {
		t.Fatalf("B runs %v, want its copy %s", got, iid)
	}

	// Inside the backoff: no attempt, nothing chained.
	before := a.lcSeq()
	for range 3 {
		lc.advance(3 * time.Second) // 9 s of 10
		a.tick()
	}
	if n := tries.Load(); n != 1 {
		t.Fatalf("%d unload attempts inside the backoff, want none after the first", n)
	}
	if got := a.lcSince(before, ""); len(got) != 0 {
		t.Fatalf("ticks inside the backoff chained %s", lcKinds(got))
	}

	// After it: tried again, refused again, not chained again.
	lc.advance(2 * time.Second) // 11 s
	a.tick()
	if n, alerts := tries.Load(), notUnloaded(); n != 2 || len(alerts) != 1 {
		t.Fatalf("after the backoff: %d attempts, %d alerts; want 2 and 1 (the same failure chained once)", n, len(alerts))
	}
	if p := lc.mustPl(dec); p.Attempts != 2 {
		t.Fatalf("the orphan's placement after the second refusal: %+v", p)
	}

	// B's host can stop it now; the doubled backoff (20 s) still holds.
	lc.b.setStopFault(nil)
	before = a.lcSeq()
	lc.advance(10 * time.Second) // 10 s of 20
	a.tick()
	if _, still := lc.pl(dec); !still {
		t.Fatal("unloaded inside the doubled backoff")
	}
	if got := a.lcSince(before, ""); len(got) != 0 {
		t.Fatalf("a tick inside the doubled backoff chained %s", lcKinds(got))
	}
	lc.advance(11 * time.Second) // 21 s
	a.tick()
	if _, still := lc.pl(dec); still {
		t.Fatalf("the orphan is still placed after the backoff: %+v", lc.mustPl(dec))
	}
	lc.wantOrphanUnloaded(dec, iid, nu[0])
	if n := len(notUnloaded()); n != 1 {
		t.Fatalf("%d not-unloaded alerts, want 1", n)
	}
}

// TestMeshtest_9_10_PinnedAlertsThenRecovers: an instance pinned to B
// (ctl place b DIR) whose node is cut off is lost after dead_after and
// not moved: one alert ("pinned"), chained once however many ticks pass.
// B returns with the instance: the placement is placed again ("node
// rejoined with the instance"), running, on B, and nothing was placed
// elsewhere.
func TestMeshtest_9_10_PinnedAlertsThenRecovers(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{})
	a := lc.a
	dec, iid := lc.placeTicked(lc.idB, "b")

	lc.m.cut("b")
	a.lcWaitUnlinked(lc.idB)
	a.tick()
	lc.pastDeadAfter()
	for range 3 {
		lc.pastDeadAfter()
	}
	lc.wantLostInPlace("pinned placement on a dead node", dec, "pinned", "C", lc.c)

	lc.m.heal("b")
	waitFor(t, "B to rejoin with the instance", func() bool {
		a.tick()
		return lc.mustPl(dec).Life == plane.LifePlaced
	})
	if got := a.lcLifecycle(dec, string(plane.LifePlaced)); len(got) != 1 || got[0].Payload["reason"] != "node rejoined with the instance" {
		t.Fatalf("rejoin records: %+v", got)
	}
	a.tick()
	if p := lc.mustPl(dec); p.HostState != "running" || p.Node != lc.idB {
		t.Fatalf("after the rejoin: %+v", p)
	}
	if got := lc.b.lcRunning(); len(got) != 1 || got[0] != iid {
		t.Fatalf("B runs %v", got)
	}
}

// TestMeshtest_9_10_StoppedNotPlacedAgain: the operator stops the
// instance on B through A; B dies; after dead_after the instance is lost
// with the alert "it was not running when it was lost", and nothing is
// started on C.
func TestMeshtest_9_10_StoppedNotPlacedAgain(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{})
	a := lc.a
	res := lc.place(lc.idB, "--prefer", "b")
	dec := res.DecisionID
	a.ctlOK("stop", "b", res.InstanceID)
	a.tick()

	lc.b.kill()
	a.tick()
	lc.pastDeadAfter()
	lc.pastDeadAfter()
	lc.wantLostInPlace("stopped placement on a dead node", dec, "not running", "C", lc.c)
}

// TestMeshtest_9_10_FallbackUnverified: B dies while C, the only
// fallback, has never verified a describe (it is not running). The grace
// comes first (nothing on the first tick); after dead_after the instance
// is lost and its reschedule fails, the refusal chained once however
// often it is retried. C starts and verifies: a node that becomes alive
// ends the backoff, and the instance is rescheduled on C at the next tick
// without the clock moving.
func TestMeshtest_9_10_FallbackUnverified(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{noC: true})
	a := lc.a
	dec, _ := lc.placeTicked(lc.idB)

	lc.b.kill()
	before := a.lcSeq()
	a.tick()
	if got := a.lcSince(before, plane.ChainSource); len(got) != 0 || lc.mustPl(dec).Life != plane.LifePlaced {
		t.Fatalf("the grace tick chained %s", lcKinds(got))
	}
	lc.pastDeadAfter()
	p := lc.mustPl(dec)
	if p.Life != plane.LifeLost || p.Attempts != 1 || len(lc.others(dec)) != 0 {
		t.Fatalf("after dead_after: %+v, others %+v", p, lc.others(dec))
	}
	for range 2 { // retried after each backoff: 10 s, 20 s
		lc.advance(25 * time.Second)
		a.tick()
	}
	if p := lc.mustPl(dec); p.Attempts != 3 {
		t.Fatalf("attempts %d, want 3", p.Attempts)
	}
	refusals := a.find(plane.KindRefuse, map[string]any{"decision_id": dec})
	if len(refusals) != 1 || !strings.Contains(refusals[0].Payload["reason"].(string), "reschedule failed") {
		t.Fatalf("refusals: %+v", refusals)
	}

	// C verifies while the third attempt's backoff (40 s) runs: a node
	// that becomes alive ends it; the clock stands still.
	lc.startC()
	a.waitAlive(lc.idC)
	waitFor(t, "the reschedule on C without waiting out the backoff", func() bool {
		o := lc.others(dec)
		if len(o) == 1 && o[0].Life == plane.LifePlaced {
			return true
		}
		a.tick()
		return false
	})
	if o := lc.others(dec); o[0].Node != lc.idC || len(lc.c.lcRunning()) != 1 {
		t.Fatalf("rescheduled %+v; C runs %v", o, lc.c.lcRunning())
	}
	if got := a.find(plane.KindMigrate, map[string]any{"from_node": lc.idB, "to_node": lc.idC, "reason": "node_dead"}); len(got) != 1 {
		t.Fatalf("migrate records: %+v", a.find(plane.KindMigrate, nil))
	}
}

// TestMeshtest_9_10_DemotedFallbackThenPromoted: C is linked and answers
// but A lists it as discovered, below the kind's min_tier paired. B dies:
// the reschedule fails (plane.refuse) and C gets nothing. The operator
// lists C as paired and reloads A: once the backoff has passed, the
// instance is rescheduled on C.
func TestMeshtest_9_10_DemotedFallbackThenPromoted(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{tierC: "discovered"})
	a := lc.a
	a.waitAlive(lc.idC) // C answers; its tier alone keeps it out
	dec, _ := lc.placeTicked(lc.idB)

	lc.b.kill()
	a.tick()
	lc.pastDeadAfter()
	lc.advance(11 * time.Second)
	a.tick()
	if p := lc.mustPl(dec); p.Life != plane.LifeLost || p.Attempts != 2 || len(lc.others(dec)) != 0 {
		t.Fatalf("with C discovered: %+v, others %+v", p, lc.others(dec))
	}
	if got := a.find(plane.KindRefuse, map[string]any{"decision_id": dec}); len(got) != 1 {
		t.Fatalf("refusals: %+v", got)
	}
	if got := lc.c.lcHeld().Instances; len(got) != 0 {
		t.Fatalf("C holds %+v", got)
	}

	if err := os.WriteFile(a.cfgPath, []byte(lc.aConfig("paired", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.n.reloader.Reload(); err != nil {
		t.Fatal(err)
	}
	lc.tickUntil("the reschedule on C", 21*time.Second, func() bool {
		o := lc.others(dec)
		return len(o) == 1 && o[0].Life == plane.LifePlaced
	})
	o := lc.others(dec)
	if len(o) != 1 || o[0].Node != lc.idC || o[0].Life != plane.LifePlaced || lc.mustPl(dec).Life != plane.LifeRescheduled {
		t.Fatalf("after C was paired: %+v", a.ctrl().Placements())
	}
	if got := lc.c.lcRunning(); len(got) != 1 || got[0] != o[0].InstanceID {
		t.Fatalf("C runs %v", got)
	}
}

// TestMeshtest_9_10_RebootInsideGrace: B restarts (its host comes back
// without the instance) well inside dead_after. A's next tick with B
// answering finds the instance missing: lost ("instance missing though
// its node is up"), placed again at once on B (no move), chained as
// a migrate of reason instance_lost; one copy runs.
func TestMeshtest_9_10_RebootInsideGrace(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{})
	a := lc.a
	dec, iid := lc.placeTicked(lc.idB, "--prefer", "b")

	lc.b.restart()
	// The clock stands still until B answers: it is back inside the grace.
	waitFor(t, "B to answer without the instance", func() bool {
		a.tick()
		return len(a.lcLifecycle(dec, string(plane.LifeLost))) > 0
	})
	lc.tickUntil("the lost instance to be replaced", 11*time.Second, func() bool {
		_, still := lc.pl(dec)
		return !still || lc.mustPl(dec).Life == plane.LifeRescheduled
	})
	if got := a.lcLifecycle(dec, string(plane.LifeLost)); len(got) != 1 ||
		got[0].Payload["reason"] != "instance missing though its node is up (restart?)" {
		t.Fatalf("lost records: %+v", got)
	}
	ps := a.ctrl().Placements()
	if len(ps) != 1 || ps[0].Life != plane.LifePlaced || ps[0].Node != lc.idB || len(ps[0].Moves) != 0 {
		t.Fatalf("placements: %+v", ps)
	}
	mig := a.find(plane.KindMigrate, nil)
	if len(mig) != 1 || mig[0].Payload["reason"] != "instance_lost" || mig[0].Payload["from_instance"] != iid ||
		mig[0].Payload["to_instance"] != ps[0].InstanceID {
		t.Fatalf("migrate records: %+v", mig)
	}
	if n := len(lc.b.lcRunning()) + len(lc.c.lcRunning()); n != 1 {
		t.Fatalf("%d copies run (B %v, C %v)", n, lc.b.lcRunning(), lc.c.lcRunning())
	}
}

// TestMeshtest_9_10_UnloadedBehindTheBackIsGone: B's own operator (its
// key is among B's host.controllers) unloads
// the instance A placed there. A's next tick finds it departed
// ("unloaded") and forgets it ("no longer on its node: unloaded"); it is
// never placed again, however many ticks pass.
func TestMeshtest_9_10_UnloadedBehindTheBackIsGone(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{bSelf: true})
	a := lc.a
	dec, iid := lc.placeTicked(lc.idB, "--prefer", "b")

	lc.b.ctlOK("unload", "self", iid)
	a.tick()
	if _, still := lc.pl(dec); still {
		t.Fatalf("placement kept: %+v", lc.mustPl(dec))
	}
	if got := a.lcLifecycle(dec, "unloaded"); len(got) != 1 || got[0].Payload["reason"] != "no longer on its node: unloaded" {
		t.Fatalf("gone records: %+v", got)
	}
	for range 3 {
		lc.pastDeadAfter()
	}
	if ps := a.ctrl().Placements(); len(ps) != 0 || len(lc.b.lcHeld().Instances)+len(lc.c.lcHeld().Instances) != 0 {
		t.Fatalf("placed again: %+v", ps)
	}
}

// TestMeshtest_9_10_PinnedRebootAfterGrace: an instance pinned to B; B
// dies for longer than dead_after (lost, alert "pinned"), then restarts
// without it. A places it again on B, the same instance id (a node
// derives it from the workload), chained as a migrate of reason
// instance_lost; one placement, running on B, one reschedule.
func TestMeshtest_9_10_PinnedRebootAfterGrace(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{})
	a := lc.a
	dec, iid := lc.placeTicked(lc.idB, "b")

	lc.b.kill()
	a.tick()
	lc.pastDeadAfter()
	if p := lc.mustPl(dec); p.Life != plane.LifeLost || len(a.find(plane.KindAlert, map[string]any{"decision_id": dec})) != 1 {
		t.Fatalf("pinned on a dead node: %+v, alerts %+v", p, a.find(plane.KindAlert, nil))
	}

	lc.b.run()
	lc.tickUntil("the instance placed again on B", 11*time.Second, func() bool {
		_, still := lc.pl(dec)
		return !still
	})
	ps := a.ctrl().Placements()
	if len(ps) != 1 || ps[0].Node != lc.idB || ps[0].InstanceID != iid || ps[0].Life != plane.LifePlaced || len(ps[0].Moves) != 0 {
		t.Fatalf("placements: %+v", ps)
	}
	if mig := a.find(plane.KindMigrate, nil); len(mig) != 1 || mig[0].Payload["reason"] != "instance_lost" ||
		mig[0].Payload["from_node"] != lc.idB || mig[0].Payload["to_node"] != lc.idB {
		t.Fatalf("migrate records: %+v", mig)
	}
	if got := lc.b.lcRunning(); len(got) != 1 || got[0] != iid || len(lc.c.lcHeld().Instances) != 0 {
		t.Fatalf("B runs %v, C holds %v", got, lc.c.lcHeld().Instances)
	}
}

// TestMeshtest_9_10_NoNodeRetriedWithBackoff: B dies and no other node
// can take the instance (C is down). The reschedule is retried with a
// doubling backoff, nothing is attempted during a backoff, the alert
// "still retrying" is chained when the attempts reach max_reschedules,
// and it never gives up: once C starts, the instance is placed there.
func TestMeshtest_9_10_NoNodeRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{noC: true, ctrl: "  max_reschedules: 2\n"})
	a := lc.a
	dec, _ := lc.placeTicked(lc.idB)

	lc.b.kill()
	a.tick()
	lc.pastDeadAfter() // attempt 1; the next in 10 s
	steps := []struct {
		advance  time.Duration
		attempts int
	}{
		{9 * time.Second, 1},  // inside the backoff
		{1 * time.Second, 2},  // attempt 2; the next in 20 s
		{19 * time.Second, 2}, // inside the backoff
		{1 * time.Second, 3},  // attempt 3; the next in 40 s
		{39 * time.Second, 3},
	}
	for i, s := range steps {
		before := a.lcSeq()
		lc.advance(s.advance)
		a.tick()
		p := lc.mustPl(dec)
		if p.Attempts != s.attempts {
			t.Fatalf("step %d: attempts %d, want %d", i, p.Attempts, s.attempts)
		}
		if s.attempts == 3 && i == 4 {
			if got := a.lcSince(before, plane.ChainSource); len(got) != 0 {
				t.Fatalf("a tick inside the backoff chained %s", lcKinds(got))
			}
		}
	}
	if got := a.find(plane.KindRefuse, map[string]any{"decision_id": dec}); len(got) != 1 {
		t.Fatalf("refusals: %+v", got)
	}
	lc.wantOneAlert(dec, "still retrying")

	lc.startC()
	waitFor(t, "the reschedule on C", func() bool {
		lc.advance(10 * time.Second)
		a.tick()
		o := lc.others(dec)
		return len(o) == 1 && o[0].Life == plane.LifePlaced
	})
	if o := lc.others(dec); o[0].Node != lc.idC || len(lc.c.lcRunning()) != 1 {
		t.Fatalf("rescheduled %+v; C runs %v", o, lc.c.lcRunning())
	}
}

// TestMeshtest_9_10_MaxReschedulesCaps: with max_reschedules 1, the
// instance moves from B (killed) to C once. B restarts (its replaced copy
// is gone: orphan unloaded); then C dies: the instance is lost and stays
// put, capped, with the alert "moved 1 times in the last 1h0m0s", though
// B could take it, until the operator's ctl start clears the cap: then it
// goes to B.
func TestMeshtest_9_10_MaxReschedulesCaps(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{ctrl: "  max_reschedules: 1\n"})
	a := lc.a
	dec, _ := lc.placeTicked(lc.idB, "--prefer", "b")
	lc.b.kill()
	a.tick()
	lc.pastDeadAfter()
	o := lc.others(dec)
	if len(o) != 1 || o[0].Node != lc.idC || len(o[0].Moves) != 1 {
		t.Fatalf("first move: %+v", a.ctrl().Placements())
	}
	moved := o[0].DecisionID

	lc.b.run()
	lc.tickUntil("B back and its old copy settled", 11*time.Second, func() bool {
		_, still := lc.pl(dec)
		return !still
	})
	a.waitAlive(lc.idB)
	lc.c.kill()
	a.tick()
	lc.pastDeadAfter()
	lc.pastDeadAfter()
	lc.wantLostInPlace("second loss", moved, "capped: lost, not placed again: moved 1 times", "B", lc.b)
	if p := lc.mustPl(moved); !p.Capped {
		t.Fatalf("not capped: %+v", p)
	}
	// The operator's start clears the cap: placed again, on B.
	if out := a.ctlOK("start", moved[:16]); !strings.Contains(out, "cap cleared") {
		t.Fatalf("ctl start of a capped placement: %q", out)
	}
	a.tick()
	if o := lc.others(moved); len(o) != 1 || o[0].Node != lc.idB || o[0].Life != plane.LifePlaced {
		t.Fatalf("after ctl start: %+v", a.ctrl().Placements())
	}
}

// TestMeshtest_9_10_UnloadWhileUnreachableNotUndone: B is cut off; its
// own operator unloads the instance meanwhile. After dead_after the
// instance is lost (no other node: its reschedule fails). B returns and
// lists it departed: A forgets it ("taken down while unreachable:
// unloaded") and places nothing.
func TestMeshtest_9_10_UnloadWhileUnreachableNotUndone(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{twoNodes: true, bSelf: true})
	a := lc.a
	dec, iid := lc.placeTicked(lc.idB)

	lc.m.cut("b")
	a.lcWaitUnlinked(lc.idB)
	lc.b.ctlOK("unload", "self", iid)
	a.tick()
	lc.pastDeadAfter()
	if p := lc.mustPl(dec); p.Life != plane.LifeLost {
		t.Fatalf("after dead_after: %+v", p)
	}

	lc.m.heal("b")
	waitFor(t, "B to return", func() bool {
		a.tick()
		_, still := lc.pl(dec)
		return !still
	})
	if got := a.lcLifecycle(dec, "unloaded"); len(got) != 1 || got[0].Payload["reason"] != "taken down while unreachable: unloaded" {
		t.Fatalf("gone records: %+v", a.find(plane.KindLifecycle, map[string]any{"decision_id": dec}))
	}
	for range 2 {
		lc.pastDeadAfter()
	}
	if ps := a.ctrl().Placements(); len(ps) != 0 || len(lc.b.lcHeld().Instances) != 0 {
		t.Fatalf("placed again: %+v", ps)
	}
}

// TestMeshtest_9_10_FreshPlacementClearsDeparted: an instance unloaded
// through A is listed departed on B; placing the same package on B again
// gives the same instance id, which leaves B's departed list, and A's
// ticks keep the new placement (it is not taken for departed).
func TestMeshtest_9_10_FreshPlacementClearsDeparted(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{twoNodes: true})
	a := lc.a
	res := lc.place(lc.idB)
	iid := res.InstanceID
	a.ctlOK("unload", "b", iid)
	if held := lc.b.lcHeld(); len(held.Departed) != 1 || held.Departed[0].InstanceID != iid {
		t.Fatalf("B after the unload: %+v", held)
	}

	again := lc.place(lc.idB)
	if again.InstanceID != iid {
		t.Fatalf("instance id %s, want the same %s", again.InstanceID, iid)
	}
	if held := lc.b.lcHeld(); len(held.Departed) != 0 || len(held.Instances) != 1 {
		t.Fatalf("B after the new place: %+v", held)
	}
	for range 2 {
		lc.advance(5 * time.Second)
		a.tick()
	}
	if p := lc.mustPl(again.DecisionID); p.Life != plane.LifePlaced || p.HostState != "running" {
		t.Fatalf("new placement: %+v", p)
	}
}
