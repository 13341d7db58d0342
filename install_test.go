package nodeld_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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

// TestMakeBuildStatic builds nodeld with the Makefile's own recipe and checks
// that the binary is static and carries the version.
func TestMakeBuildStatic(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the static check reads ELF; make build is checked on Linux")
	}
	bin := filepath.Join(t.TempDir(), "nodeld")
	runMake(t, "build", "BIN="+bin, "VERSION="+testVersion)
	checkStatic(t, bin)
	checkVersion(t, bin)
}
