package nodeld_test

import (
	"crypto/sha256"
	"debug/elf"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testVersion is the VERSION the make tests build with; `nodeld version`
// must report it, which shows the Makefile's ldflags reached the binary.
const testVersion = "v0.0.0-maketest"

// makeEnv is the environment for a make run by a test: the caller's, without
// make's own variables (a `make test` parent hands its flags and command-line
// variables down through MAKEFLAGS) and without the variables the Makefile
// reads, so that each run sees exactly what the test passes.
func makeEnv() []string {
	drop := map[string]bool{
		"MAKEFLAGS": true, "MFLAGS": true, "MAKELEVEL": true, "MAKEFILES": true,
		"GOFLAGS": true, "CGO_ENABLED": true, "GOOS": true, "GOARCH": true,
		"VERSION": true, "BIN": true, "DESTDIR": true, "PREFIX": true, "BINDIR": true,
		"DOCDIR": true, "UNITDIR": true, "SYSUSERSDIR": true, "TMPFILESDIR": true,
		"RELEASE_TARGETS": true, "RELEASE_DIR": true,
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !drop[name] {
			env = append(env, kv)
		}
	}
	return env
}

// runMake runs make in the repository root with args and returns its output;
// the test fails if make does.
func runMake(t *testing.T, args ...string) string {
	t.Helper()
	out, err := makeCmd(t, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func makeCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	tool, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make not installed")
	}
	cmd := exec.Command(tool, append([]string{"--no-print-directory"}, args...)...)
	cmd.Env = makeEnv()
	return cmd
}

// checkStatic fails unless path is an ELF executable that needs no dynamic
// loader and no shared library, so that it runs on any Linux of its
// architecture whatever its libc.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a PT_INTERP program header: it is dynamically linked", path)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(libs) != 0 {
		t.Errorf("%s needs shared libraries %v", path, libs)
	}
}

// checkVersion runs `path version` and checks it reports testVersion.
func checkVersion(t *testing.T, path string) {
	t.Helper()
	out, err := exec.Command(path, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", path, err, out)
	}
	if want := "nodeld " + testVersion + " "; !strings.HasPrefix(string(out), want) {
		t.Errorf("%s version = %q, want it to start with %q", path, out, want)
	}
}

// TestMakeInstall builds nodeld once with the Makefile's own recipe, checks
// that the binary is static, then drives `make install` and `make uninstall`
// in scratch roots (DESTDIR) as an operator would: a first install, an
// upgrade over an edited config, an uninstall, and another PREFIX.
func TestMakeInstall(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("make install is for Linux with systemd")
	}
	bin := filepath.Join(t.TempDir(), "nodeld")
	runMake(t, "build", "BIN="+bin, "VERSION="+testVersion)
	checkStatic(t, bin)
	checkVersion(t, bin)

	repo := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	example := repo("configs/nodeld.yaml")
	// What a default install puts in DESTDIR. The shipped unit names the
	// default paths, so it is installed unchanged.
	installed := map[string]wantFile{
		"usr/local/bin/nodeld":                   {0o755, repo(bin)},
		"usr/lib/systemd/system/nodeld.service":  {0o644, repo("deploy/systemd/nodeld.service")},
		"usr/lib/sysusers.d/nodeld.conf":         {0o644, repo("deploy/systemd/nodeld.sysusers")},
		"usr/lib/tmpfiles.d/nodeld.conf":         {0o644, repo("deploy/systemd/nodeld.tmpfiles")},
		"usr/local/share/doc/nodeld/README.md":   {0o644, repo("README.md")},
		"usr/local/share/doc/nodeld/nodeld.yaml": {0o644, example},
		"etc/nodeld/nodeld.yaml":                 {0o640, example},
	}
	root := t.TempDir()
	unitPath := filepath.Join(root, "usr/lib/systemd/system/nodeld.service")
	confPath := filepath.Join(root, "etc/nodeld/nodeld.yaml")

	t.Run("install", func(t *testing.T) {
		out := runMake(t, "install", "DESTDIR="+root, "BIN="+bin)
		checkTree(t, root, installed)
		if fi, err := os.Stat(filepath.Dir(confPath)); err != nil || fi.Mode().Perm() != 0o750 {
			t.Errorf("etc/nodeld: %v, want a directory with mode 0750", fi.Mode())
		}
		for _, want := range []string{
			"nothing was started or enabled", "systemd-sysusers nodeld.conf",
			"systemd-tmpfiles --create nodeld.conf", "systemctl daemon-reload",
			"systemctl enable --now nodeld",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("make install output lacks %q:\n%s", want, out)
			}
		}
		if tool, err := exec.LookPath("systemd-analyze"); err == nil {
			verifyUnit(t, tool, repo(unitPath), "/usr/local/bin/nodeld", filepath.Join(root, "usr/local/bin/nodeld"))
		}
		checkAccounts(t, root)
	})

	t.Run("upgrade keeps the operator's config", func(t *testing.T) {
		edited := "# the operator's own\n" + example
		if err := os.WriteFile(confPath, []byte(edited), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(confPath, 0o600); err != nil {
			t.Fatal(err)
		}
		// Stale copies of what an upgrade replaces.
		for _, rel := range []string{"usr/local/bin/nodeld", "usr/lib/systemd/system/nodeld.service"} {
			if err := os.WriteFile(filepath.Join(root, rel), []byte("old\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out := runMake(t, "install", "DESTDIR="+root, "BIN="+bin)
		want := maps.Clone(installed)
		want["etc/nodeld/nodeld.yaml"] = wantFile{0o600, edited}
		checkTree(t, root, want)
		if !strings.Contains(out, "never overwritten") {
			t.Errorf("make install does not say it kept the config:\n%s", out)
		}
	})

	t.Run("uninstall keeps the config", func(t *testing.T) {
		out := runMake(t, "uninstall", "DESTDIR="+root)
		checkTree(t, root, map[string]wantFile{
			"etc/nodeld/nodeld.yaml": {0o600, "# the operator's own\n" + example},
		})
		if !strings.Contains(out, "Kept /etc/nodeld") {
			t.Errorf("make uninstall does not say what it kept:\n%s", out)
		}
	})

	t.Run("PREFIX=/usr", func(t *testing.T) {
		root := t.TempDir()
		runMake(t, "install", "DESTDIR="+root, "BIN="+bin, "PREFIX=/usr")
		unit := repo(filepath.Join(root, "usr/lib/systemd/system/nodeld.service"))
		if diff := cmp.Diff([]string{"/usr/bin/nodeld run --config /etc/nodeld/nodeld.yaml"}, unitValues(unit, "ExecStart")); diff != "" {
			t.Errorf("installed ExecStart= (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"file:///usr/share/doc/nodeld/README.md"}, unitValues(unit, "Documentation")); diff != "" {
			t.Errorf("installed Documentation= (-want +got):\n%s", diff)
		}
		for _, rel := range []string{"usr/bin/nodeld", "usr/share/doc/nodeld/README.md", "etc/nodeld/nodeld.yaml"} {
			if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
				t.Error(err)
			}
		}
		runMake(t, "uninstall", "DESTDIR="+root, "PREFIX=/usr")
		checkTree(t, root, map[string]wantFile{"etc/nodeld/nodeld.yaml": {0o640, example}})
	})

	t.Run("install without a binary", func(t *testing.T) {
		root := t.TempDir()
		out, err := makeCmd(t, "install", "DESTDIR="+root, "BIN="+filepath.Join(root, "missing")).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "run make build first") {
			t.Errorf("make install with no binary: err %v, output:\n%s", err, out)
		}
		checkTree(t, root, nil)
	})
}

// wantFile is a regular file a test expects: its permission bits and content.
type wantFile struct {
	mode    os.FileMode
	content string
}

// checkTree fails unless the regular files under root are exactly want, each
// with its mode and content.
func checkTree(t *testing.T, root string, want map[string]wantFile) {
	t.Helper()
	got := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		got[rel] = true
		w, ok := want[rel]
		if !ok {
			t.Errorf("unexpected %s", rel)
			return nil
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != w.mode {
			t.Errorf("%s: mode %v, want a regular file with mode %04o", rel, fi.Mode(), w.mode)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if string(b) != w.content {
			t.Errorf("%s: content differs from what was installed", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel := range want {
		if !got[rel] {
			t.Errorf("missing %s", rel)
		}
	}
}

// checkAccounts checks that the installed sysusers.d and tmpfiles.d files
// name the user and group the installed unit runs as, and, where systemd's
// tools exist, applies them to a second scratch root: systemd-sysusers must
// make a system user with no login shell, and systemd-tmpfiles (as root, to
// chown) must leave /etc/nodeld and its config readable by that group only.
func checkAccounts(t *testing.T, root string) {
	t.Helper()
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	unit := read("usr/lib/systemd/system/nodeld.service")
	user, group := unitValues(unit, "User"), unitValues(unit, "Group")
	if len(user) != 1 || len(group) != 1 || user[0] != group[0] {
		t.Fatalf("unit has User=%v Group=%v; want one user with a group of the same name (a sysusers.d u line makes both)", user, group)
	}
	name := user[0]
	sysusers := read("usr/lib/sysusers.d/nodeld.conf")
	tmpfiles := read("usr/lib/tmpfiles.d/nodeld.conf")
	if diff := cmp.Diff([][]string{{"u", name, "-", `"nodeld`, `node`, `daemon"`, "/var/lib/nodeld"}}, configLines(sysusers)); diff != "" {
		t.Errorf("sysusers.d lines (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{
		{"d", "/etc/nodeld", "0750", "root", name, "-"},
		{"z", "/etc/nodeld/nodeld.yaml", "0640", "root", name, "-"},
	}, configLines(tmpfiles)); diff != "" {
		t.Errorf("tmpfiles.d lines (-want +got):\n%s", diff)
	}

	tool, err := exec.LookPath("systemd-sysusers")
	if err != nil {
		t.Log("systemd-sysusers not installed; checked the sysusers.d line by hand")
		return
	}
	sys := t.TempDir()
	for rel, content := range map[string]string{
		"usr/lib/sysusers.d/nodeld.conf": sysusers,
		"usr/lib/tmpfiles.d/nodeld.conf": tmpfiles,
		"etc/nodeld/nodeld.yaml":         "node:\n  name: a\n",
	} {
		path := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// systemd-sysusers reports a bad line on stderr and still exits 0.
	out, err := exec.Command(tool, "--root="+sys).CombinedOutput()
	if err != nil || strings.Contains(string(out), "nodeld.conf:") {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	}
	pw := findEntry(t, filepath.Join(sys, "etc/passwd"), name)
	if len(pw) != 7 || !strings.HasSuffix(pw[6], "/nologin") {
		t.Errorf("passwd entry %q: want a user with a nologin shell", pw)
	}
	gr := findEntry(t, filepath.Join(sys, "etc/group"), name)
	if len(pw) < 4 || len(gr) < 3 || pw[3] != gr[2] {
		t.Fatalf("passwd %q and group %q: want the user's primary group to be %s", pw, gr, name)
	}

	tool, err = exec.LookPath("systemd-tmpfiles")
	if err != nil || os.Geteuid() != 0 {
		t.Log("systemd-tmpfiles not installed or not root; checked the tmpfiles.d lines by hand")
		return
	}
	if out, err := exec.Command(tool, "--root="+sys, "--create", "nodeld.conf").CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("systemd-tmpfiles: %v\n%s", err, out)
	}
	for rel, mode := range map[string]os.FileMode{"etc/nodeld": 0o750, "etc/nodeld/nodeld.yaml": 0o640} {
		fi, err := os.Stat(filepath.Join(sys, rel))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != mode || st.Uid != 0 || strconv.FormatUint(uint64(st.Gid), 10) != gr[2] {
			t.Errorf("/%s after systemd-tmpfiles: mode %04o uid %d gid %d, want %04o root:%s (gid %s)",
				rel, fi.Mode().Perm(), st.Uid, st.Gid, mode, name, gr[2])
		}
	}
}

// configLines returns the whitespace-separated fields of each line of a
// sysusers.d or tmpfiles.d file that is not blank or a comment.
func configLines(text string) [][]string {
	var lines [][]string
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			lines = append(lines, f)
		}
	}
	return lines
}

// findEntry returns the colon-separated fields of name's line in an
// /etc/passwd or /etc/group file.
func findEntry(t *testing.T, path, name string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); f[0] == name {
			return f
		}
	}
	t.Fatalf("%s has no entry for %s:\n%s", path, name, b)
	return nil
}

// TestMakeRelease runs `make release` for this host's target only (the three
// default targets are three full builds, too slow for `make test`) and checks
// the binary and SHA256SUMS; that the default targets are the three shipped
// ones is read from make's dry run.
func TestMakeRelease(t *testing.T) {
	out, err := makeCmd(t, "-n", "release", "RELEASE_DIR="+t.TempDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n release: %v\n%s", err, out)
	}
	for _, target := range []string{"linux/amd64", "linux/arm64", "darwin/arm64"} {
		if !strings.Contains(string(out), target) {
			t.Errorf("make release does not build %s by default:\n%s", target, out)
		}
	}

	dir := t.TempDir()
	// A previous release's files go; anything else stays.
	for name, content := range map[string]string{
		"nodeld-v0.0.0-old-linux-amd64": "old", "SHA256SUMS": "old", "NOTES": "mine",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	target := runtime.GOOS + "/" + runtime.GOARCH
	runMake(t, "release", "RELEASE_DIR="+dir, "RELEASE_TARGETS="+target, "VERSION="+testVersion)
	name := "nodeld-" + testVersion + "-" + runtime.GOOS + "-" + runtime.GOARCH
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"NOTES", "SHA256SUMS", name}, names); diff != "" {
		t.Errorf("release dir (-want +got):\n%s", diff)
	}

	// SHA256SUMS in sha256sum's own format: "<hex>  <name>", one per binary.
	bin, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x  %s\n", sha256.Sum256(bin), name); string(sums) != want {
		t.Errorf("SHA256SUMS = %q, want %q", sums, want)
	}
	if tool, err := exec.LookPath("sha256sum"); err == nil {
		check := exec.Command(tool, "-c", "SHA256SUMS")
		check.Dir = dir
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
		}
	}

	if runtime.GOOS == "linux" {
		checkStatic(t, filepath.Join(dir, name))
	}
	checkVersion(t, filepath.Join(dir, name))
}
