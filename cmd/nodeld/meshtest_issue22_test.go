package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/runner"
)

// copyDir copies the regular files of src (one level) into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := e.Info()
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMeshtest_FailoverPlacesWhatWasPlaced: an operator places 0.1.0 of
// the package from a directory of its own. The directory is then moved
// away, and a 0.2.0 of the same package, signed by the same publisher,
// put at its path. B, running the instance, is killed: the failover on C
// places the 0.1.0 that was placed (its manifest hash), read from the
// controller's placed-package store, not what the path holds now.
func TestMeshtest_FailoverPlacesWhatWasPlaced(t *testing.T) {
	t.Parallel()
	lc := newLC(t, lcOpts{})
	a := lc.a
	opDir := filepath.Join(t.TempDir(), "echo-llm")
	copyDir(t, lc.pkgDir, opDir)
	res, rc, errOut := a.placeJSON("--prefer", "b", opDir)
	if rc != 0 || res.Outcome != "placed" || res.Node != lc.idB {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	a.tick()
	placed := lc.mustPl(res.DecisionID)
	kept := filepath.Join(a.dataDir, pkg.PlacedDir, placed.ManifestHash)
	if placed.Order == nil || placed.Order.Kept != kept {
		t.Fatalf("not kept in %s: %+v", kept, placed.Order)
	}

	// The operator's directory moves; a re-signed 0.2.0 takes its path.
	if err := os.Rename(opDir, opDir+".old"); err != nil {
		t.Fatal(err)
	}
	copyDir(t, lc.pkgDir, opDir)
	tmpl, err := os.ReadFile("../../examples/packages/echo-llm/manifest.template.json")
	if err != nil {
		t.Fatal(err)
	}
	tmplPath := filepath.Join(t.TempDir(), "manifest.template.json")
	if err := os.WriteFile(tmplPath, []byte(strings.Replace(string(tmpl), `"version": "0.1.0"`, `"version": "0.2.0"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(filepath.Dir(lc.pkgDir), "publisher.key")
	for _, args := range [][]string{
		{"package", "build", "--manifest", tmplPath, opDir},
		{"package", "sign", "--key", key, opDir},
	} {
		if _, errOut, rc := runCLI(t, args...); rc != 0 {
			t.Fatalf("%v: %q", args, errOut)
		}
	}
	if err := os.RemoveAll(opDir + ".old"); err != nil {
		t.Fatal(err)
	}

	lc.b.kill()
	a.tick()
	lc.pastDeadAfter()
	nu := lc.others(res.DecisionID)
	if len(nu) != 1 || nu[0].Node != lc.idC || nu[0].Life != plane.LifePlaced {
		t.Fatalf("no failover to C: %+v; alerts %+v", a.ctrl().Placements(), a.find(plane.KindAlert, nil))
	}
	if nu[0].Version != "0.1.0" || nu[0].ManifestHash != placed.ManifestHash {
		t.Fatalf("failover placed %s (manifest %s), want 0.1.0 (manifest %s)", nu[0].Version, nu[0].ManifestHash, placed.ManifestHash)
	}
	if got := lc.c.lcRunning(); len(got) != 1 || got[0] != nu[0].InstanceID {
		t.Fatalf("C runs %v", got)
	}
}

// TestMeshtest_FailedInstanceStartedAgain: B's host gives up on an
// instance at its first exit (a restart budget of none) while its model
// server cannot start (the package's start script fails while a flag
// file exists): the instance is failed. A's controller starts it again
// at its next tick (chained, the host refuses: the server still cannot
// start), and again after the backoff once the server can: it runs.
func TestMeshtest_FailedInstanceStartedAgain(t *testing.T) {
	t.Parallel()
	base := filepath.Dir(echoBinary(t))
	// The flag is in a directory placed instances may read; the pid goes
	// to the instance's scratch directory, the one place it may write.
	flag := filepath.Join(base, "issue22-fail.flag")
	pre := "[ -f '" + flag + "' ] && exit 1\necho $$ > \"$NODELD_SCRATCH/pid\"\n"
	dir, anchor := meshPackage(t, "echo-failing", echoManifest("echo-failing", "start.sh", defaultVariant),
		map[string]string{"start.sh": lightScript(t, pre)})
	m := newMesh(t, "a", "b")
	m.node("b").restartPolicy = runner.RestartPolicy{Max: 0, Window: time.Hour, Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	b := m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor)))
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	a.waitAlive(m.id("b"))
	res, rc, errOut := a.placeJSON(dir)
	if rc != 0 || res.Outcome != "placed" {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	a.tick()
	t.Cleanup(func() { os.Remove(flag) })
	pidFile := filepath.Join(m.node("b").dataDir, "scratch", res.InstanceID, "pid")
	state := func() string {
		for _, in := range b.lcHeld().Instances {
			if in.InstanceID == res.InstanceID {
				return in.Lifecycle
			}
		}
		return ""
	}
	// The server dies and cannot start: the host gives up.
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the instance failed on B", func() bool { return state() == ctl.StateFailed })

	a.tick() // started again: refused, the server still cannot start
	if got := a.find(plane.KindLifecycle, map[string]any{"decision_id": res.DecisionID, "to": ctl.StateRunning}); len(got) != 1 {
		t.Fatalf("restart records: %+v", got)
	}
	if pl := a.ctrl().Placements()[0]; pl.FailedSince.IsZero() || pl.Attempts != 1 {
		t.Fatalf("after the first start: %+v", pl)
	}
	if st := state(); st == ctl.StateRunning {
		t.Fatal("running while its server cannot start")
	}
	a.tick() // inside the backoff: nothing
	if got := a.find(plane.KindLifecycle, map[string]any{"decision_id": res.DecisionID, "to": ctl.StateRunning}); len(got) != 1 {
		t.Fatalf("started again inside the backoff: %+v", got)
	}

	// The server can start again: after the backoff it runs.
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	m.clock.Advance(11 * time.Second)
	a.tick()
	if st := state(); st != ctl.StateRunning {
		t.Fatalf("not running after the second start: %s; alerts %+v", st, a.find(plane.KindAlert, nil))
	}
}
