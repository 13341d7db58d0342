package host

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

// packageDir is the directory the host keeps p in.
func (c *cluster) packageDir(p testPackage) string {
	return filepath.Join(PackagesDir(c.hostNode.Dir), packageDirName(p.m.ID, p.m.Version, pkg.ManifestHash(p.manifest)))
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// Instances of one package share its directory: unloading one keeps the
// files the other uses, unloading the last removes them.
func TestUnloadRemovesUnusedPackageDir(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	p := buildEcho(t, c.publisher)
	first, _, err := c.place(t, p, false)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	dir := c.packageDir(p)
	// A second instance of the same package, with another config, reuses
	// the directory without a fetch.
	d := newDecision()
	c.srv.offer(d, p)
	params := p.params(false)
	params.Config = json.RawMessage(`{"port":45123}`)
	fetches := c.srv.fetches.Load()
	var second ctl.PlaceResult
	c.mustCall(t, ctl.MethodLoad, params, d, &second)
	if second.InstanceID == first.InstanceID || c.srv.fetches.Load() != fetches {
		t.Fatalf("second instance %s (first %s), %d fetches", second.InstanceID, first.InstanceID, c.srv.fetches.Load()-fetches)
	}

	c.mustCall(t, ctl.MethodUnload, ctl.InstanceParams{InstanceID: first.InstanceID}, newDecision(), nil)
	if _, err := pkg.VerifyDir(dir, pkg.Anchors{pubOf(c.publisher)}, c.rev); err != nil {
		t.Fatalf("the second instance's package after the first's unload: %v", err)
	}
	c.mustCall(t, ctl.MethodUnload, ctl.InstanceParams{InstanceID: second.InstanceID}, newDecision(), nil)
	if exists(t, dir) {
		t.Error("package directory left after its last instance was unloaded")
	}
	if !exists(t, PackagesDir(c.hostNode.Dir)) {
		t.Error("the packages root was removed")
	}
}

// A place whose start fails is rolled back, and its freshly fetched
// package directory goes with it.
func TestFailedPlaceRemovesPackageDir(t *testing.T) {
	c := newCluster(t, clusterOpts{noRun: true}) // no Run: nothing can start
	p := buildEcho(t, c.publisher)
	if _, _, err := c.place(t, p, true); refusalCode(err) != ctl.CodeRuntime {
		t.Fatalf("place without Run: %v, want a runtime refusal", err)
	}
	if c.srv.fetches.Load() == 0 {
		t.Fatal("nothing was fetched")
	}
	if exists(t, c.packageDir(p)) {
		t.Error("package directory left by a failed place")
	}
}

// removePackageDir removes one directory directly under the packages
// root, and nothing outside it, whatever the name or the links.
func TestRemovePackageDirStaysInRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "packages")
	outside := filepath.Join(base, "outside")
	victim := filepath.Join(outside, "victim")
	for _, d := range []string{filepath.Join(root, ".partial", "x"), filepath.Join(root, "pkg-1-ab", "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A link to the outside as a package directory, and one inside a
	// package directory.
	if err := os.Symlink(outside, filepath.Join(root, "link-1-ab")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "pkg-1-ab", "sub", "escape")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		wantErr bool
	}{
		{name: "../outside", wantErr: true},
		{name: "..", wantErr: true},
		{name: outside, wantErr: true},
		{name: "pkg-1-ab/../../outside", wantErr: true},
		{name: ".partial", wantErr: true},
		{name: "", wantErr: true},
		{name: "link-1-ab", wantErr: true},
		{name: "absent-1-ab"},
		{name: "pkg-1-ab"},
	}
	for _, tt := range tests {
		if err := removePackageDir(root, tt.name); (err != nil) != tt.wantErr {
			t.Errorf("removePackageDir(%q) = %v, want error %v", tt.name, err, tt.wantErr)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
		t.Errorf("outside file after the removals: %q %v", b, err)
	}
	if exists(t, filepath.Join(root, "pkg-1-ab")) {
		t.Error("package directory not removed")
	}
	for _, p := range []string{filepath.Join(root, ".partial", "x"), filepath.Join(root, "link-1-ab")} {
		if !exists(t, p) {
			t.Errorf("%s removed", p)
		}
	}
}
