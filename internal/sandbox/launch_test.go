//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain runs the test binary as the launcher when started as one.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == LauncherName {
		os.Exit(LauncherMain())
	}
	os.Exit(m.Run())
}

// TestLauncherConfines starts cat through the launcher: it reads a file
// of its package directory and writes its scratch, and is refused the
// file beside them (a stand-in for node.key).
func TestLauncherConfines(t *testing.T) {
	if LandlockABI() < 1 {
		t.Skip("the kernel has no Landlock")
	}
	data := t.TempDir()
	pkgDir := filepath.Join(data, "packages", "p")
	if err := os.MkdirAll(pkgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(pkgDir, "model"), "weights")
	mustWrite(t, filepath.Join(data, "node.key"), "secret")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	iso, err := New(Config{Filesystem: ModeOn, Resources: ModeOff, Users: ModeOff, DataDir: data, Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	if s := iso.Support(); s.Filesystem != "landlock" || s.Users != StateOff || s.Cgroup != StateOff {
		t.Fatalf("Support = %+v", s)
	}
	in, err := iso.Instance("p-00000000-n-0000000000000000", pkgDir, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	run := func(script string) (string, error) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = pkgDir
		started, ended, err := in.Wrap(cmd)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for _, f := range cmd.ExtraFiles {
			f.Close()
		}
		if err := started(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		if ended() {
			t.Error("reported an OOM kill")
		}
		return out.String(), err
	}
	if out, err := run(`cat model && echo x > "$TMPDIR/t" && echo ok`); err != nil || out != "weightsok\n" {
		t.Fatalf("allowed paths: %q, %v", out, err)
	}
	if out, err := run(`cat ../../node.key`); err == nil {
		t.Fatalf("read node.key: %q", out)
	}
	if out, err := run(`echo x > pwned`); err == nil {
		t.Fatalf("wrote the package dir: %q", out)
	}
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
