package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/plane"
)

// instances lists the instances name's own host holds (ctl status self
// on its operator socket).
func (mn *mnode) instances() []ctl.InstanceStatus {
	mn.m.t.Helper()
	var st ctl.StatusList
	ctlJSON(mn.m.t, mn.socket(), &st, "status", "self")
	return st.Instances
}

// threeNodes starts A (controller, no host) and hosts B and C, both
// paired, with the controller's extra config; A's place hook is hook.
func threeNodes(t *testing.T, anchor, ctrlExtra string, hook func(m *meshT) func(context.Context, string) error) (*meshT, *mnode, *mnode, *mnode) {
	t.Helper()
	return threeNodesOn(t, newMesh(t, "a", "b", "c"), anchor, ctrlExtra, hook)
}

// threeNodesOn is threeNodes on a mesh made by the caller (nodes a, b
// and c, with probes set as it likes).
func threeNodesOn(t *testing.T, m *meshT, anchor, ctrlExtra string, hook func(m *meshT) func(context.Context, string) error) (*meshT, *mnode, *mnode, *mnode) {
	t.Helper()
	keyA := m.node("a").key
	b := m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}, {name: "c", tier: "paired"}}, meshHost(keyA, anchor)))
	c := m.start("c", m.config("c", []peer{{name: "a", tier: "paired"}, {name: "b", tier: "paired"}}, meshHost(keyA, anchor)))
	if hook != nil {
		m.node("a").afterPlace = hook(m)
	}
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}, {name: "c", tier: "paired"}}, meshController(anchor, ctrlExtra)))
	a.waitAlive(m.id("b"), m.id("c"))
	return m, a, b, c
}

// TestMeshtest_9_4_StartFailureRollsBack: B loads the package, but its
// start fails (the package's start script refuses to run on B), so B
// unloads it and refuses the place; the controller tries the next
// candidate, C, which places it: exactly one instance. The refusal is
// chained on A (plane.dispatch refused, trying the next candidate) and on
// B (host.place.refused). nodeld has no start gate: a start failure is a
// runtime refusal where the reference's gate denial is governance.
func TestMeshtest_9_4_StartFailureRollsBack(t *testing.T) {
	t.Parallel()
	script := lightScript(t, "case \"$PWD\" in */b/*) echo 'start refused on b' >&2; exit 3;; esac\n")
	dir, anchor := meshPackage(t, "picky", echoManifest("picky", "start.sh", defaultVariant), map[string]string{"start.sh": script})
	m, a, b, c := threeNodes(t, anchor, "", nil)
	idB, idC := m.id("b"), m.id("c")

	res, rc, errOut := a.placeJSON("--prefer", "b", dir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idC || len(res.Attempts) != 2 {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	first := res.Attempts[0]
	if first.Node != idB || first.Outcome != "refused" || first.Code != string(ctl.CodeRuntime) ||
		!strings.Contains(first.Reason, "start failed") || !strings.Contains(first.Reason, "unloaded") {
		t.Fatalf("first attempt: %+v", first)
	}
	if got := a.find(plane.KindDispatch, map[string]any{"decision_id": res.DecisionID, "node": idB, "outcome": "refused", "next": "trying the next candidate"}); len(got) != 1 {
		t.Fatalf("A's dispatch records of B: %+v", a.find(plane.KindDispatch, nil))
	}
	if got := b.find("host.place.refused", map[string]any{"decision_id": res.DecisionID, "code": ctl.CodeRuntime}); len(got) != 1 {
		t.Fatalf("B's refusal: %+v", b.find("host.place.refused", nil))
	}
	wantInstances(t, b, c, 0, 1)
}

// wantInstances fails unless B holds nB instances and C nC.
func wantInstances(t *testing.T, b, c *mnode, nB, nC int) {
	t.Helper()
	if n, nc := len(b.instances()), len(c.instances()); n != nB || nc != nC {
		t.Fatalf("instances: B %d, C %d; want %d and %d", n, nc, nB, nC)
	}
}

// loseBsFirstAnswer is a place hook for threeNodes: the answer to the
// first place sent to B is lost (an error), after also (when not nil)
// has run with B's node id; every other place goes through.
func loseBsFirstAnswer(also func(ctx context.Context, m *meshT, node string) error) func(m *meshT) func(context.Context, string) error {
	var lost atomic.Int32
	return func(m *meshT) func(context.Context, string) error {
		return func(ctx context.Context, node string) error {
			if node != m.id("b") || lost.Add(1) != 1 {
				return nil
			}
			if also != nil {
				if err := also(ctx, m, node); err != nil {
					return err
				}
			}
			return errors.New("answer lost (test)")
		}
	}
}

// TestMeshtest_9_4_LostAnswerReconciled: B places the instance but its
// answer is lost on the way back (the place hook). The attempt is
// indeterminate; the controller reconciles with B before anything else.
// B holds the instance, so nodeld adopts it where the reference unloads
// it and tries the next candidate: one instance, on B, and nothing sent
// to C.
func TestMeshtest_9_4_LostAnswerReconciled(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m, a, b, c := threeNodes(t, anchor, "", loseBsFirstAnswer(nil))
	idB := m.id("b")
	res, rc, errOut := a.placeJSON("--prefer", "b", pkgDir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idB || len(res.Attempts) != 1 {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	if at := res.Attempts[0]; at.Outcome != "indeterminate" || !strings.Contains(at.Reason, "reconciled: the node holds the instance") {
		t.Fatalf("attempt: %+v", at)
	}
	if got := a.find(plane.KindDispatch, map[string]any{"decision_id": res.DecisionID, "outcome": "indeterminate", "next": "adopted"}); len(got) != 1 {
		t.Fatalf("A's dispatch records: %+v", a.find(plane.KindDispatch, nil))
	}
	if got := a.find(plane.KindAdopted, map[string]any{"decision_id": res.DecisionID, "node": idB}); len(got) != 1 {
		t.Fatalf("A's adopted records: %+v", got)
	}
	wantInstances(t, b, c, 1, 0)
}

// TestMeshtest_9_4_LostAnswerNotHeldTriesNext: B's answer is lost and B
// no longer holds the instance when the controller asks (it was unloaded
// meanwhile): reconciled, the node does not hold it, so the controller
// tries the next candidate, C, and chains "trying the next candidate".
func TestMeshtest_9_4_LostAnswerNotHeldTriesNext(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m, a, b, c := threeNodes(t, anchor, "", loseBsFirstAnswer(func(ctx context.Context, m *meshT, node string) error {
		// B's instance goes before the controller hears of it.
		d := m.node("a").n.dispatch
		ans, err := d.Call(ctx, node, ctl.MethodStatus, ctl.InstanceParams{})
		if err != nil {
			return err
		}
		var st ctl.StatusList
		if err := ctl.DecodeResult(ans.Response.Result, &st); err != nil {
			return err
		}
		for _, in := range st.Instances {
			if _, err := d.Call(ctx, node, ctl.MethodUnload, ctl.InstanceParams{InstanceID: in.InstanceID}); err != nil {
				return err
			}
		}
		return nil
	}))
	idB, idC := m.id("b"), m.id("c")
	res, rc, errOut := a.placeJSON("--prefer", "b", pkgDir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idC || len(res.Attempts) != 2 {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	if at := res.Attempts[0]; at.Node != idB || at.Outcome != "indeterminate" || !strings.Contains(at.Reason, "reconciled: the node does not hold the instance") {
		t.Fatalf("attempt on B: %+v", at)
	}
	if got := a.find(plane.KindDispatch, map[string]any{"decision_id": res.DecisionID, "node": idB, "outcome": "indeterminate", "next": "trying the next candidate"}); len(got) != 1 {
		t.Fatalf("A's dispatch records: %+v", a.find(plane.KindDispatch, nil))
	}
	wantInstances(t, b, c, 0, 1)
}

// TestMeshtest_9_4_LostAnswerTargetUnreachable: B's answer is lost and B
// is cut off the mesh at that moment, so the controller cannot ask it:
// placement stops after one attempt ("not reconciled"), chained with
// "stopped: the target may hold the instance", and nothing goes to C (no
// duplicate). Once B is back, a tick settles the decision: B holds the
// instance and the controller adopts it. One instance throughout.
func TestMeshtest_9_4_LostAnswerTargetUnreachable(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m, a, b, c := threeNodes(t, anchor, "", loseBsFirstAnswer(func(_ context.Context, m *meshT, _ string) error {
		m.cut("b")
		return nil
	}))
	idB := m.id("b")
	res, rc, errOut := a.placeJSON("--prefer", "b", pkgDir)
	if rc != 3 || res.Outcome != "unsettled" || len(res.Attempts) != 1 {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	if at := res.Attempts[0]; at.Node != idB || at.Outcome != "indeterminate" || !strings.Contains(at.Reason, "not reconciled") {
		t.Fatalf("attempt: %+v", at)
	}
	if got := a.find(plane.KindDispatch, map[string]any{"decision_id": res.DecisionID, "next": "stopped: the target may hold the instance"}); len(got) != 1 {
		t.Fatalf("A's dispatch records: %+v", a.find(plane.KindDispatch, nil))
	}
	if len(c.instances()) != 0 {
		t.Fatal("C got an instance while B may hold one")
	}
	ps := a.ctrl().Placements()
	if len(ps) != 1 || ps[0].Life != plane.LifeUnsettled {
		t.Fatalf("placements: %+v", ps)
	}

	m.heal("b")
	waitFor(t, "the decision to settle once B is back", func() bool {
		a.tick()
		ps := a.ctrl().Placements()
		return len(ps) == 1 && ps[0].Life != plane.LifeUnsettled
	})
	if ps := a.ctrl().Placements(); ps[0].Node != idB {
		t.Fatalf("settled on %s, want B", ps[0].Node)
	}
	wantInstances(t, b, c, 1, 0)
}
