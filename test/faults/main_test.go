//go:build faults

package faults

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// requireEnv set to 1 turns every reason to skip into a failure: CI sets
// it, so a machine that cannot run the suite fails instead of passing
// with nothing tested.
const requireEnv = "NODELD_FAULTS_REQUIRE"

var (
	// skipReason is why this machine cannot run the suite, "" if it can.
	skipReason string
	// bins holds the binaries TestMain built: nodeld and echo-llm.
	bins struct{ nodeld, echo string }
	// repoRoot is the module's root directory.
	repoRoot string
)

// TestMain checks that the suite can run here (root, iproute2, network
// namespaces), builds nodeld (static, as make build does) and the echo-llm
// example once, runs the tests, and removes everything they made even when
// interrupted (SIGINT, SIGTERM). Namespaces left by a run that was killed
// outright are removed by the next run.
func TestMain(m *testing.M) {
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	repoRoot = root
	skipReason = checkMachine()
	var tmp string
	if skipReason == "" {
		removeStale()
		tmp, err = os.MkdirTemp("", "nodeld-faults-bin-")
		if err == nil {
			err = buildBinaries(tmp)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fault suite: build:", err)
			os.Exit(1)
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "fault suite: %v: removing namespaces, mounts and processes\n", s)
			runCleanups()
			os.Exit(2)
		case <-done:
		}
	})
	code := m.Run()
	runCleanups()
	signal.Stop(sigs)
	close(done)
	wg.Wait()
	if tmp != "" {
		os.RemoveAll(tmp)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "fault suite: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// checkMachine returns why the suite cannot run here, or "".
func checkMachine() string {
	if os.Geteuid() != 0 {
		return "needs root (network namespaces, veth pairs, mounts): run `sudo make faults`"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "needs the ip command (iproute2; scripts/test-deps.sh installs it)"
	}
	probe := fmt.Sprintf("%s%d-probe", nsPrefix, os.Getpid())
	if err := ip("netns", "add", probe); err != nil {
		return "cannot create network namespaces: " + err.Error()
	}
	_ = ip("netns", "del", probe)
	return ""
}

// needMachine skips t (fails it under NODELD_FAULTS_REQUIRE=1) when the
// suite cannot run here.
func needMachine(t *testing.T) {
	t.Helper()
	if skipReason == "" {
		return
	}
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("fault suite cannot run here: %s", skipReason)
	}
	t.Skipf("fault suite skipped: %s", skipReason)
}

func buildBinaries(dir string) error {
	bins.nodeld = filepath.Join(dir, "nodeld")
	bins.echo = filepath.Join(dir, "echo-llm")
	// nodeld with the nodeld_testhooks tag: the suite uses its --test-*
	// flags (the shipped binary has none).
	for _, b := range []struct{ out, pkg, tags string }{{bins.nodeld, "./cmd/nodeld", "nodeld_testhooks"}, {bins.echo, "./examples/packages/echo-llm", ""}} {
		cmd := exec.Command("go", "build", "-trimpath", "-tags", b.tags, "-o", b.out, b.pkg)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w: %s", b.pkg, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// cleanups are what the suite made outside its temp dirs (processes,
// mounts, namespaces), undone in reverse order by the test's cleanup, or
// by TestMain on a signal. Each runs once.
var cleanups struct {
	sync.Mutex
	fns []func()
}

// atCleanup registers fn and returns a function that runs it at most
// once (and drops it from the list).
func atCleanup(fn func()) func() {
	var once sync.Once
	run := func() { once.Do(fn) }
	cleanups.Lock()
	cleanups.fns = append(cleanups.fns, run)
	cleanups.Unlock()
	return run
}

func runCleanups() {
	cleanups.Lock()
	fns := slices.Clone(cleanups.fns)
	cleanups.fns = nil
	cleanups.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}
