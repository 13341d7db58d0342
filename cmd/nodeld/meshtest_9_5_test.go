package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctlraft"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/raftmesh"
)

// view is the controller's view of node id (ok false when it is no
// target).
func (mn *mnode) view(id string) (plane.NodeView, bool) {
	for _, v := range mn.ctrl().NodeViews() {
		if v.ID == id {
			return v, true
		}
	}
	return plane.NodeView{}, false
}

// statePath is the node's controller state file.
func (mn *mnode) statePath() string { return filepath.Join(mn.dataDir, plane.StateFile) }

// TestMeshtest_9_5_RestartRestoresPlacements: the state (the raft log of
// a single controller) is 0600;
// after a controller restart its placement is listed at once, while B is
// not alive until a tick describes it again; status, stop and unload of
// the placed instance work through the restarted controller, and the
// unload is durable (another restart lists nothing).
func TestMeshtest_9_5_RestartRestoresPlacements(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b")
	b := m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor)))
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	idB := m.id("b")
	a.waitAlive(idB)
	res, rc, errOut := a.placeJSON(pkgDir)
	if rc != 0 || res.Outcome != "placed" {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	fi, err := os.Stat(filepath.Join(a.dataDir, ctlraft.Dir, raftmesh.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := os.Stat(a.statePath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a single controller wrote %s: %v", plane.StateFile, err)
	}

	a.restart()
	ps := a.ctrl().Placements()
	if len(ps) != 1 || ps[0].DecisionID != res.DecisionID || ps[0].Node != idB || ps[0].InstanceID != res.InstanceID || ps[0].Order == nil {
		t.Fatalf("placements after the restart: %+v", ps)
	}
	if v, ok := a.view(idB); !ok || v.Liveness == engine.Alive || v.HasFacts {
		t.Fatalf("B before any describe: %+v (known %v), want known, not alive, no facts", v, ok)
	}
	a.waitAlive(idB)
	out := a.ctlOK("status", "b", res.InstanceID)
	if !strings.Contains(out, "running") {
		t.Fatalf("status after the restart:\n%s", out)
	}
	a.ctlOK("stop", "b", res.InstanceID)
	a.ctlOK("unload", "b", res.InstanceID)
	if ps := a.ctrl().Placements(); len(ps) != 0 {
		t.Fatalf("placements after unload: %+v", ps)
	}
	if n := len(b.instances()); n != 0 {
		t.Fatalf("B holds %d instances after the unload", n)
	}
	a.restart()
	if ps := a.ctrl().Placements(); len(ps) != 0 {
		t.Fatalf("the unload was not durable: %+v", ps)
	}
}

// TestMeshtest_9_5_RestoredTargetKeepsItsKey: A pins B's key on first
// contact (its config gives none). While A is down, B is replaced by a
// node with another key at the same address. The restarted A describes B
// only with the key it pinned: the new key is never learned (the link is
// refused, chained), B stays without facts and is not alive, and no
// target appears under the new key.
func TestMeshtest_9_5_RestoredTargetKeepsItsKey(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b")
	cfgB := m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor))
	m.start("b", cfgB)
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired", noKey: true}}, meshController(anchor, "")))
	idB := m.id("b")
	waitFor(t, "A to pin B and describe it", func() bool {
		a.tick()
		v, ok := a.view(idB)
		return ok && v.Liveness == engine.Alive && v.HasFacts
	})
	if res, rc, errOut := a.placeJSON(pkgDir); rc != 0 || res.Node != idB {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	a.kill()
	b := m.node("b")
	b.kill()
	// B is reflashed: a new key in the same data dir, at the same address.
	if err := os.RemoveAll(b.dataDir); err != nil {
		t.Fatal(err)
	}
	b.key = makeKey(t, b.dataDir)
	newID := m.id("b")
	b.run()
	a.run()
	for range 3 {
		a.tick()
	}
	v, ok := a.view(idB)
	if !ok || v.Liveness == engine.Alive || v.HasFacts {
		t.Fatalf("B under its old key: %+v (known %v), want known, not alive, no facts", v, ok)
	}
	if _, ok := a.view(newID); ok {
		t.Fatalf("the new key %s became a target", newID)
	}
	waitFor(t, "A to chain its refusal of the new key", func() bool {
		return len(a.find(mesh.KindPeerRefused, map[string]any{"reason": mesh.RefusalKeyDiffers, "key": b.key})) > 0
	})
}

// TestMeshtest_9_5_MalformedStateFileRefused: a state file that is not
// the controller's (garbage, another version, truncated) stops the node
// from starting, with an error naming the file, and is left byte for
// byte as it was.
func TestMeshtest_9_5_MalformedStateFileRefused(t *testing.T) {
	t.Parallel()
	_, anchor := meshLightPackage(t)
	m := newMesh(t, "a")
	a := m.start("a", m.config("a", nil, "host:\n  enabled: true\n  trust_anchors: ["+anchor+"]\n"+binReadable()+meshController(anchor, "")))
	a.kill()
	for _, bad := range []string{
		"not json at all",
		`{"version": 99, "placements": []}`,
		`{"version": 1, "placements": [`,
	} {
		if err := os.WriteFile(a.statePath(), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		err := a.tryRun()
		if err == nil {
			t.Fatalf("state %q: the node started", bad)
		}
		if !strings.Contains(err.Error(), plane.StateFile) {
			t.Fatalf("state %q: error %v does not name the file", bad, err)
		}
		got, rerr := os.ReadFile(a.statePath())
		if rerr != nil || !bytes.Equal(got, []byte(bad)) {
			t.Fatalf("state %q: file now %q (%v)", bad, got, rerr)
		}
	}
}

// TestMeshtest_9_5_LifecycleSurvivesRestart: A places on B, then
// restarts; the restored placement keeps its order. B dies: the
// restarted controller waits dead_after (the fake clock), marks the
// instance lost and reschedules it on C from the stored order.
func TestMeshtest_9_5_LifecycleSurvivesRestart(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m, a, b, c := threeNodes(t, anchor, "", nil)
	idB, idC := m.id("b"), m.id("c")
	res, rc, errOut := a.placeJSON("--prefer", "b", pkgDir)
	if rc != 0 || res.Node != idB {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	a.tick()
	a.restart()
	ps := a.ctrl().Placements()
	if len(ps) != 1 || ps[0].Order == nil || ps[0].Order.PackageDir != pkgDir || ps[0].Life != plane.LifePlaced {
		t.Fatalf("restored placements: %+v", ps)
	}
	a.waitAlive(idB, idC)
	b.kill()
	a.tick() // B does not answer: not dead yet
	if ps := a.ctrl().Placements(); len(ps) != 1 || ps[0].Life != plane.LifePlaced {
		t.Fatalf("after one silent tick: %+v", ps)
	}
	m.clock.Advance(31 * time.Second)
	waitFor(t, "the instance to move to C", func() bool {
		a.tick()
		for _, p := range a.ctrl().Placements() {
			if p.Node == idC && p.Life == plane.LifePlaced {
				return true
			}
		}
		return false
	})
	if got := a.find(plane.KindMigrate, nil); len(got) != 1 {
		t.Fatalf("migrate records: %+v", got)
	}
	if n := len(c.instances()); n != 1 {
		t.Fatalf("C holds %d instances", n)
	}
}
