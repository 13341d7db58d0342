package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/nodeld/nodeld/internal/sandbox"
)

// binDir holds the binaries the binary-level tests run: nodeld itself
// (with -race) and the echo-llm example model server. Each is built by the
// first test that needs it (nodeldBinary, echoBinary), not by TestMain:
// fuzz workers run TestMain too, and building nodeld in each of them cost
// seconds per fuzz target.
var binDir string

var nodeldBuild, shippedBuild, echoBuild lazyBinary

// lazyBinary is a binary built once, on first use.
type lazyBinary struct {
	once sync.Once
	path string
	err  error
}

func (b *lazyBinary) get(t testing.TB, name string, args ...string) string {
	t.Helper()
	b.once.Do(func() {
		path := filepath.Join(binDir, name)
		cmd := exec.Command("go", append(append([]string{"build"}, args[:len(args)-1]...), "-o", path, args[len(args)-1])...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build %s: %v\n%s", name, err, out)
			return
		}
		b.path = path
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// nodeldBinary returns nodeld built with -race from this directory, with
// the nodeld_testhooks tag: its nodeld run has the --test-* flags that
// some tests need (testhooks.go).
func nodeldBinary(t testing.TB) string {
	return nodeldBuild.get(t, "nodeld", "-race", "-tags", "nodeld_testhooks", ".")
}

// shippedBinary returns nodeld as it ships: without the nodeld_testhooks
// tag (built with -race only so that it shares nodeldBinary's build cache).
func shippedBinary(t testing.TB) string { return shippedBuild.get(t, "nodeld-shipped", "-race", ".") }

// echoBinary returns the echo-llm example server.
func echoBinary(t testing.TB) string {
	return echoBuild.get(t, "echo-llm", "../../examples/packages/echo-llm")
}

// widenParallel runs twice as many parallel tests as there are CPUs (at
// least 4), not go test's one per CPU, unless -parallel was given: these
// tests wait far more than they compute (daemons starting, ticks, links,
// a CLI run), so the package used under one of two cores at one per CPU
// (BENCHMARKS.md "Test time"). A fuzzing run keeps its default, which is
// its number of workers.
func widenParallel() {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			given = true
		}
	}
	if given {
		return
	}
	_ = flag.Set("test.parallel", strconv.Itoa(max(4, 2*runtime.GOMAXPROCS(0))))
}

func TestMain(m *testing.M) {
	// In-process nodes launch their instances through this test binary
	// (os.Executable), as nodeld does through itself.
	if filepath.Base(os.Args[0]) == sandbox.LauncherName {
		os.Exit(sandbox.LauncherMain())
	}
	// A -race binary sleeps a second when it exits (the race runtime's
	// atexit_sleep_ms): each CLI run and each daemon stopped would pay it.
	// The binaries these tests start inherit the setting (make test sets
	// it for the test binaries too); a caller's own setting wins.
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		_ = os.Setenv("GORACE", strings.TrimSpace("atexit_sleep_ms=0 "+g))
	}
	flag.Parse()
	widenParallel()
	dir, err := os.MkdirTemp("", "nodeld-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
