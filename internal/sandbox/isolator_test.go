//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestScratchLeftByAnEarlierRunIsRemoved: a daemon that ended without
// unloading (a crash, kill -9) left scratch directories behind; the next
// start removes them, and a place of the same instance id starts with an
// empty scratch directory rather than what the earlier run wrote.
func TestScratchLeftByAnEarlierRunIsRemoved(t *testing.T) {
	data := t.TempDir()
	const id = "p-00000000-n-0000000000000000"
	old := filepath.Join(data, "scratch", "gone-00000000-n-0000000000000000")
	writeAll(t, filepath.Join(old, "tmp", "f"))
	cfg := Config{Filesystem: ModeOff, Resources: ModeOff, Users: ModeOff, DataDir: data, Exe: "/bin/true"}
	iso, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("scratch left by an earlier run: stat = %v, want it removed", err)
	}

	// The same instance id placed again after a crash between New and
	// this place (its directory made by hand here).
	writeAll(t, filepath.Join(data, "scratch", id, "ran"))
	in, err := iso.Instance(id, t.TempDir(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := os.Stat(filepath.Join(in.Scratch(), "ran")); !os.IsNotExist(err) {
		t.Fatalf("a new place sees its earlier run's files: stat = %v", err)
	}
	if fi, err := os.Stat(filepath.Join(in.Scratch(), "tmp")); err != nil || !fi.IsDir() {
		t.Fatalf("scratch tmp: %v", err)
	}
}

// writeAll writes a file at p, making its directories.
func writeAll(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("left"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestEmptyCgroupsLeftByAnEarlierRunAreRemoved: the empty cgroups of this
// node's instances that a crashed run left are removed at the next start;
// another node's on the same machine, and one a process is still in,
// stay.
func TestEmptyCgroupsLeftByAnEarlierRunAreRemoved(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups (CI runs as root)")
	}
	cfg := Config{Filesystem: ModeOff, Resources: ModeOn, Users: ModeOff, DataDir: t.TempDir(), Exe: "/bin/true"}
	probe, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if probe.cg == nil {
		t.Skip("no cgroups here: " + probe.Support().Problem)
	}
	const self, other = "n-00000000000000aa", "n-00000000000000bb"
	left := cgroupPrefix + "gone-00000000-" + self
	theirs := cgroupPrefix + "theirs-00000000-" + other
	busy := cgroupPrefix + "busy-00000000-" + self
	for _, name := range []string{left, theirs} {
		if _, err := probe.cg.create(name, Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	g, err := probe.cg.create(busy, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleep.Process.Kill()
		_ = sleep.Wait()
		for _, name := range []string{left, theirs, busy} {
			for _, base := range probe.cg.base {
				_ = os.Remove(filepath.Join(base, name))
			}
		}
	})
	if err := g.join(sleep.Process.Pid); err != nil {
		t.Fatal(err)
	}

	cfg.NodeID = self
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	for _, base := range probe.cg.base {
		if _, err := os.Stat(filepath.Join(base, left)); !os.IsNotExist(err) {
			t.Errorf("%s: this node's empty cgroup left by an earlier run: stat = %v, want it removed", base, err)
		}
		if _, err := os.Stat(filepath.Join(base, theirs)); err != nil {
			t.Errorf("%s: another node's cgroup: %v, want it kept", base, err)
		}
		if _, err := os.Stat(filepath.Join(base, busy)); err != nil {
			t.Errorf("%s: a cgroup a process is in: %v, want it kept", base, err)
		}
	}
}
