package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
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
