package main

import (
	"errors"
	"os"
	"testing"

	"github.com/nodeld/nodeld/internal/ctlraft"
	"github.com/nodeld/nodeld/internal/plane"
)

// TestSingleControllerUpgradeImportsStateFile (issue 25 acceptance 5, a
// single controller): a controller of a version before raft placed a
// workload (its state in controller.json); the new version starts on
// that file with nothing new to configure. The placement is listed at
// once, the file is imported into the controller's one-voter raft log and
// kept aside as controller.json.imported, the host runs one copy and
// nothing is decided again; the next restart reads raft alone.
func TestSingleControllerUpgradeImportsStateFile(t *testing.T) {
	t.Parallel()
	dir, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "d")
	idD := m.id("d")
	d := m.start("d", m.config("d", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor)))
	m.node("a").stateFile = true // the version before raft
	a := m.start("a", m.config("a", []peer{{name: "d", tier: "paired"}}, meshController(anchor, "")))
	a.waitAlive(idD)
	res, rc, errOut := a.placeJSON(dir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idD {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	if _, err := os.Stat(a.statePath()); err != nil {
		t.Fatalf("the version before raft kept no state file: %v", err)
	}
	a.kill()

	a.stateFile = false
	a.run()
	if !hasPlacement(a.ctrl(), res.DecisionID, idD) {
		t.Fatalf("placements right after the upgrade: %+v", a.ctrl().Placements())
	}
	waitFor(t, "the state file to be imported", func() bool {
		_, err := os.Stat(a.statePath() + ctlraft.ImportedSuffix)
		return err == nil
	})
	if _, err := os.Stat(a.statePath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the state file is still in place after its import: %v", err)
	}
	a.waitAlive(idD)
	for range 2 {
		a.tick()
	}
	if got := len(d.instances()); got != 1 {
		t.Fatalf("d runs %d instances after the upgrade, want 1", got)
	}
	if got := len(a.find(plane.KindDecision, nil)); got != 1 {
		t.Fatalf("a chained %d decisions, want the one before the upgrade", got)
	}
	a.kill()
	a.run()
	if !hasPlacement(a.ctrl(), res.DecisionID, idD) {
		t.Fatalf("placements after a second restart (raft alone): %+v", a.ctrl().Placements())
	}
}
