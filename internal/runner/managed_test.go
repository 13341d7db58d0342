package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

// testDeadline bounds every wait in these tests.
const testDeadline = 20 * time.Second

// waitFor polls cond until it holds or testDeadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(testDeadline)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// recvExit waits for a run's end.
func recvExit(t *testing.T, ch <-chan ExitStatus) ExitStatus {
	t.Helper()
	select {
	case st := <-ch:
		return st
	case <-time.After(testDeadline):
		t.Fatal("timed out waiting for the run to end")
		return ExitStatus{}
	}
}

func newTestManaged(t *testing.T, spec Spec) *Managed {
	t.Helper()
	return newTestManagedDeps(t, spec, ManagedDeps{})
}

// newTestManagedDeps is newTestManaged with deps (its Logger the test's
// unless deps has one).
func newTestManagedDeps(t *testing.T, spec Spec, deps ManagedDeps) *Managed {
	t.Helper()
	if deps.Logger == nil {
		deps.Logger = zaptest.NewLogger(t)
	}
	m, err := NewManaged(spec, deps)
	if err != nil {
		t.Fatalf("NewManaged: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Stop(context.Background(), 100*time.Millisecond); err != nil {
			t.Errorf("cleanup stop: %v", err)
		}
	})
	return m
}

func echoSpec(t *testing.T, listenHost string) Spec {
	return Spec{
		Kind:       KindProcess,
		Dir:        t.TempDir(),
		Command:    needEchoLLM(t),
		Args:       []string{"--listen", listenHost + ":{port}", "--model", "echo-test"},
		HealthPath: "/health",
	}
}

func TestManagedProcessEchoLLM(t *testing.T) {
	m := newTestManaged(t, echoSpec(t, "127.0.0.1"))
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if !m.Alive() || m.PID() <= 0 {
		t.Fatalf("Alive %v PID %d after Start", m.Alive(), m.PID())
	}
	if err := m.Start(ctx); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Start: %v, want ErrAlreadyStarted", err)
	}
	if h, err := m.Health(ctx); h != HealthUp || err != nil {
		t.Fatalf("Health = %s, %v; want up", h, err)
	}
	base, ok := m.Endpoint()
	if !ok || !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("Endpoint = %q, %v", base, ok)
	}
	resp, err := NewProbeClient(time.Second).Get(base + "/v1/models")
	if err != nil {
		t.Fatalf("GET /v1/models: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"echo-test"`) {
		t.Errorf("GET /v1/models = %d %s", resp.StatusCode, body)
	}

	exit := m.Wait()
	if err := m.Stop(ctx, 10*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	st := recvExit(t, exit)
	if diff := cmp.Diff(ExitStatus{Code: 0, Stopped: true}, st, cmpExit); diff != "" {
		t.Errorf("exit status (-want +got):\n%s", diff)
	}
	if m.Alive() {
		t.Error("Alive after Stop")
	}
	if _, ok := m.Endpoint(); ok {
		t.Error("Endpoint ok after Stop")
	}
	_, stderr := m.Logs()
	want := "echo-llm: serving echo-test on " + base
	if !strings.Contains(string(stderr), want) {
		t.Errorf("stderr %q lacks %q", stderr, want)
	}
	// The last status is available after the end.
	if got := recvExit(t, m.Wait()); got.Code != 0 || !got.Stopped {
		t.Errorf("Wait after the end = %+v", got)
	}
	if h, err := m.Health(ctx); h != HealthDown || !errors.Is(err, ErrNotRunning) {
		t.Errorf("Health after Stop = %s, %v", h, err)
	}
}

// TestManagedStopReturnsWithTheExit: once Stop returns, the run's status
// is the last one, so Wait answers at once (host's stop and logs read it
// without waiting). The reaper logs the end after the run stops being
// alive and before it hands the status over; a log hook holds it there up
// to a second, so a Stop that returned on the reap alone finds no status.
func TestManagedStopReturnsWithTheExit(t *testing.T) {
	released := make(chan struct{})
	hold := zap.Hooks(func(e zapcore.Entry) error {
		if e.Message == "managed process ended" {
			select {
			case <-released:
			case <-time.After(time.Second):
			}
		}
		return nil
	})
	m := newTestManagedDeps(t, echoSpec(t, "127.0.0.1"), ManagedDeps{Logger: zaptest.NewLogger(t, zaptest.WrapOptions(hold))})
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := m.Stop(ctx, 10*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case st := <-m.Wait():
		if !st.Stopped || st.Code != 0 {
			t.Errorf("status after Stop = %+v, want a stopped run's", st)
		}
	default:
		t.Error("Stop returned before the run's status was reported: Wait does not answer at once")
	}
	close(released)
}

// cmpExit compares exit statuses without their time and wait error.
var cmpExit = cmp.Comparer(func(a, b ExitStatus) bool {
	a.At, b.At, a.Err, b.Err = time.Time{}, time.Time{}, nil, nil
	return a == b
})

func TestManagedStopKillsProcessGroup(t *testing.T) {
	// The shell and its background child both ignore SIGTERM.
	m := newTestManaged(t, Spec{
		Kind:    KindProcess,
		Dir:     t.TempDir(),
		Command: "/bin/sh",
		Args:    []string{"-c", `trap "" TERM; sleep 60 & echo "child $!"; wait`},
	})
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	var child int
	waitFor(t, "the child's pid on stdout", func() bool {
		out, _ := m.Logs()
		f := strings.Fields(string(out))
		if len(f) == 2 && f[0] == "child" {
			child, _ = strconv.Atoi(f[1])
		}
		return child > 0
	})
	exit := m.Wait()
	if err := m.Stop(ctx, 200*time.Millisecond); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	st := recvExit(t, exit)
	if diff := cmp.Diff(ExitStatus{Code: -1, Signal: syscall.SIGKILL, Stopped: true, Killed: true}, st, cmpExit); diff != "" {
		t.Errorf("exit status (-want +got):\n%s", diff)
	}
	waitFor(t, "the child to be gone", func() bool { return gone(child) })
}

// gone reports whether pid no longer runs (absent, or a zombie waiting for
// its new parent to reap it).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && strings.HasPrefix(string(b[i+1:]), " Z")
}

func TestManagedRefusesNonLoopbackListener(t *testing.T) {
	// Binding 0.0.0.0 is local only; no traffic leaves the machine.
	m := newTestManaged(t, echoSpec(t, "0.0.0.0"))
	ctx := context.Background()
	exit := m.Wait()
	err := m.Start(ctx)
	if !errors.Is(err, ErrNotLoopback) {
		t.Fatalf("Start = %v, want ErrNotLoopback", err)
	}
	if m.Alive() {
		t.Error("Alive after the refusal")
	}
	if st := recvExit(t, exit); !st.Stopped {
		t.Errorf("exit %+v, want stopped", st)
	}
	if err := m.Start(ctx); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("Start after the refusal = %v, want ErrNotLoopback", err)
	}
}

func TestManagedExitBeforeUp(t *testing.T) {
	spec := echoSpec(t, "127.0.0.1")
	spec.Args = append(spec.Args, "--no-such-flag")
	m := newTestManaged(t, spec)
	err := m.Start(context.Background())
	if !errors.Is(err, ErrExited) {
		t.Fatalf("Start = %v, want ErrExited", err)
	}
	_, stderr := m.Logs()
	if !strings.Contains(string(stderr), "no-such-flag") {
		t.Errorf("stderr %q does not name the bad flag", stderr)
	}
	// The error itself says why, for the operator reading the refusal.
	if !strings.Contains(err.Error(), "last output") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("Start = %v, want the server's last output naming the bad flag", err)
	}
	if st := recvExit(t, m.Wait()); st.Code != 1 || st.Stopped {
		t.Errorf("exit %+v, want code 1 not stopped", st)
	}
}

func TestManagedLogsKeepTail(t *testing.T) {
	m := newTestManaged(t, Spec{
		Kind:    KindProcess,
		Dir:     t.TempDir(),
		Command: "/bin/sh",
		// 1000 lines of "line N", then a marker on stderr; the cap keeps 64.
		Args:   []string{"-c", `i=0; while [ $i -lt 1000 ]; do echo "line $i"; i=$((i+1)); done; echo done >&2; exit 0`},
		LogCap: 64,
		Env:    map[string]string{"UNUSED": "{port}"},
	})
	if err := m.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	st := recvExit(t, m.Wait())
	if st.Code != 0 {
		t.Fatalf("exit %+v", st)
	}
	stdout, stderr := m.Logs()
	if len(stdout) > 64 || !strings.HasSuffix(string(stdout), "line 999\n") {
		t.Errorf("stdout tail %q (%d bytes)", stdout, len(stdout))
	}
	if string(stderr) != "done\n" {
		t.Errorf("stderr %q", stderr)
	}
}

func TestManagedEnvAndSubstitution(t *testing.T) {
	dir := t.TempDir()
	m := newTestManaged(t, Spec{
		Kind:    KindProcess,
		Dir:     dir,
		Command: "/bin/sh",
		Args:    []string{"-c", `echo "$NODELD_PORT {port} $A $PATH"; pwd; env | grep -c HOME= || true`},
		Env:     map[string]string{"A": "{dir}"},
		Port:    4321,
	})
	if err := m.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	recvExit(t, m.Wait())
	stdout, _ := m.Logs()
	real, _ := filepath.EvalSymlinks(dir)
	want := fmt.Sprintf("4321 4321 %s %s\n%s\n0\n", dir, defaultPath, real)
	if diff := cmp.Diff(want, string(stdout)); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
}

// takenPorts is a FreePort that first hands out ports the test holds
// (another socket took them before the server could bind), then free ones;
// it counts its calls.
type takenPorts struct {
	t     *testing.T
	held  []int
	calls int
}

// hold takes n ports the way the race does: as the local ports of client
// connections (to a listener of the test's), which a server cannot bind
// and which refuse a probe.
func (p *takenPorts) hold(n int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { ln.Close() })
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			p.t.Fatal(err)
		}
		p.t.Cleanup(func() { c.Close() })
		p.held = append(p.held, c.LocalAddr().(*net.TCPAddr).Port)
	}
}

func (p *takenPorts) next() (int, error) {
	p.calls++
	if len(p.held) > 0 {
		port := p.held[0]
		p.held = p.held[1:]
		return port, nil
	}
	return freeLoopbackPort()
}

func newPortManaged(t *testing.T, spec Spec, ports *takenPorts) *Managed {
	t.Helper()
	return newTestManagedDeps(t, spec, ManagedDeps{FreePort: ports.next})
}

// TestManagedPortTakenStartsElsewhere: the port nodeld picked is taken by
// another socket before the server binds it; the server exits at once and
// is started again on another port, which it serves.
func TestManagedPortTakenStartsElsewhere(t *testing.T) {
	ports := &takenPorts{t: t}
	ports.hold(portRaceAttempts - 1)
	m := newPortManaged(t, echoSpec(t, "127.0.0.1"), ports)
	if err := m.Start(context.Background()); err != nil {
		t.Fatalf("Start = %v, want the server up on a later port", err)
	}
	if ports.calls != portRaceAttempts {
		t.Errorf("%d ports picked, want %d", ports.calls, portRaceAttempts)
	}
	ep, ok := m.Endpoint()
	if !ok {
		t.Fatal("no endpoint once up")
	}
	resp, err := http.Get(ep + "/health")
	if err != nil {
		t.Fatalf("health: %v", err)
	}
	resp.Body.Close()
}

// TestManagedPortTakenBounded: a port taken on every attempt ends the
// start after portRaceAttempts with the server's reason; a server that
// exits for its own reason on a free port is not started again.
func TestManagedPortTakenBounded(t *testing.T) {
	ports := &takenPorts{t: t}
	ports.hold(portRaceAttempts + 1)
	m := newPortManaged(t, echoSpec(t, "127.0.0.1"), ports)
	err := m.Start(context.Background())
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "last output") {
		t.Fatalf("Start = %v, want ErrExited with the server's last output", err)
	}
	if ports.calls != portRaceAttempts {
		t.Errorf("%d ports picked, want %d", ports.calls, portRaceAttempts)
	}

	own := &takenPorts{t: t}
	spec := echoSpec(t, "127.0.0.1")
	spec.Args = append(spec.Args, "--no-such-flag")
	m = newPortManaged(t, spec, own)
	if err := m.Start(context.Background()); !errors.Is(err, ErrExited) {
		t.Fatalf("Start = %v, want ErrExited", err)
	}
	if own.calls != 1 {
		t.Errorf("a server failing on its own was started %d times, want 1", own.calls)
	}
}
