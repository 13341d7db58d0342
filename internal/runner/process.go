package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/grammar"
)

// procDriver is the driver of every kind whose server nodeld runs as a
// process: the process machinery they share (command line, environment,
// process group, tail logs, loopback listener check, stop grace), told by
// a procKind what its kind's server needs.
type procDriver struct {
	driverDeps
	kind      procKind
	spec      Spec
	command   string   // resolved program
	modelFile string   // resolved ModelFile, "" if none
	argv      []string // argument template, before substitution
	env       []string // "K=V" template, sorted, before substitution

	// mu guards the fields below. It is never held across process waits or
	// network I/O.
	mu sync.Mutex
	// run is the current or last run.
	run *procRun
	// port is the current or last run's port.
	port int
}

var _ driver = (*procDriver)(nil)

// procRun is one run of a managed process.
type procRun struct {
	pid            int
	stdout, stderr *tailBuffer
	// done is closed once the process is reaped, its group killed, its
	// output drained and status set; the run is no longer alive.
	done chan struct{}
	// reported is closed after done, once driverDeps.ended has handed the
	// status to the Managed: stopRun waits for it, so the last status is
	// there (Managed.Wait answers at once) when a Stop returns.
	reported chan struct{}
	status   ExitStatus
	// ended is the Launcher's end hook, nil without one.
	ended func() bool
	// mu guards stopped and killed, set by Stop before it signals.
	mu              sync.Mutex
	stopped, killed bool
}

// newProcDriver checks spec for a process-backed kind and resolves its
// command line, reporting every problem at once.
func newProcDriver(spec Spec, kind procKind, deps driverDeps) (driver, error) {
	d := &procDriver{driverDeps: deps, kind: kind, spec: spec}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if spec.URL != "" {
		bad("url is for ollama only")
	}
	if len(spec.Dir) > maxPathBytes || !filepath.IsAbs(spec.Dir) {
		bad("dir %q must be an absolute path", spec.Dir)
		return nil, errors.Join(errs...)
	}
	if fi, err := os.Stat(spec.Dir); err != nil || !fi.IsDir() {
		bad("dir %q is not a directory", spec.Dir)
	}
	if spec.HealthPath != "" && (!kind.healthPath || !grammar.ValidHealthPath(spec.HealthPath)) {
		bad("health path %q: only for process, and must be /path without query", spec.HealthPath)
	}
	if spec.ModelFile != "" {
		p, err := inDir(spec.Dir, spec.ModelFile)
		if err != nil {
			bad("model file: %w", err)
		} else if _, err := os.Stat(p); err != nil {
			bad("model file: %w", err)
		}
		d.modelFile = p
	}
	owned, err := kind.args(spec, d.modelFile)
	if err != nil {
		errs = append(errs, err)
	}
	if f := ownedFlag(spec.Args, kind.owned...); f != "" {
		bad("args: %s is set by nodeld", f)
	}
	d.argv = append(owned, spec.Args...)
	if len(d.argv) > maxSpecArgs {
		bad("%d arguments, at most %d", len(d.argv), maxSpecArgs)
	}
	for i, a := range spec.Args {
		if len(a) > maxSpecArgBytes || strings.IndexByte(a, 0) >= 0 {
			bad("args[%d]: longer than %d bytes or holds NUL", i, maxSpecArgBytes)
		}
	}
	if d.command, err = d.program(); err != nil {
		errs = append(errs, err)
	}
	if d.env, err = buildEnv(spec.Env); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return d, nil
}

// program resolves the server program: for a kind with a program of its
// own, that program (or Spec.Command) as resolveProgram finds it; for the
// others, Spec.Command, absolute or inside Spec.Dir.
func (d *procDriver) program() (string, error) {
	var (
		cmd string
		err error
	)
	switch {
	case d.kind.program != "":
		cmd, err = resolveProgram(d.spec.Command, d.kind.program, d.lookPath)
	case d.spec.Command == "":
		return "", fmt.Errorf("%s needs a command", d.spec.Kind)
	case filepath.IsAbs(d.spec.Command):
		cmd = filepath.Clean(d.spec.Command)
	default:
		cmd, err = inDir(d.spec.Dir, d.spec.Command)
	}
	if err != nil {
		return "", fmt.Errorf("command: %w", err)
	}
	if err := checkExecutable(cmd); err != nil {
		return "", fmt.Errorf("command: %w", err)
	}
	return cmd, nil
}

// endpoint returns http://127.0.0.1:<port> of the current or last run.
func (d *procDriver) endpoint() (string, bool) {
	d.mu.Lock()
	port, alive := d.port, d.aliveLocked()
	d.mu.Unlock()
	if port == 0 {
		return "", false
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port), alive
}

// aliveLocked reports whether the current run's process has not been
// reaped. d.mu must be held.
func (d *procDriver) aliveLocked() bool {
	if d.run == nil {
		return false
	}
	select {
	case <-d.run.done:
		return false
	default:
		return true
	}
}

// lastRun returns the current or last run, nil before the first.
func (d *procDriver) lastRun() *procRun {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.run
}

// start spawns a run and, when the kind has an HTTP health, waits for its
// server to come up.
func (d *procDriver) start(ctx context.Context) error {
	if d.spec.Port != 0 {
		return d.startOn(ctx, d.spec.Port)
	}
	// nodeld picks the port: between closing its probe listener and the
	// server's bind, another socket (a client's ephemeral port included)
	// can take it. A server that then exits at once is started again on
	// another port, a bounded number of times, only when its port is
	// found taken; any other early exit is the server's own failure.
	for attempt := 1; ; attempt++ {
		port, err := d.freePort()
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		err = d.startOn(ctx, port)
		if err == nil || attempt >= portRaceAttempts || !errors.Is(err, ErrExited) || !loopbackPortTaken(port) {
			return err
		}
		d.log.Warn("managed server's port was taken before it could bind; starting it on another port",
			zap.Int("port", port), zap.Int("attempt", attempt), zap.Error(err))
	}
}

// portRaceAttempts bounds the starts of a server whose port another
// socket took before it could bind.
const portRaceAttempts = 3

// loopbackPortTaken reports whether 127.0.0.1:port is held by another
// socket now (binding it fails with EADDRINUSE).
func loopbackPortTaken(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return errors.Is(err, syscall.EADDRINUSE)
	}
	_ = ln.Close()
	return false
}

// startOn spawns a run on port and, when the kind has an HTTP health,
// waits for its server to come up.
func (d *procDriver) startOn(ctx context.Context, port int) error {
	r, err := d.spawn(port)
	if err != nil {
		return fmt.Errorf("start %s: %w", d.command, err)
	}
	d.mu.Lock()
	d.run, d.port = r, port
	d.mu.Unlock()
	d.log.Info("managed process started", zap.String("kind", string(d.spec.Kind)),
		zap.Int("pid", r.pid), zap.Int("port", port))
	if d.kind.probe == nil {
		return nil
	}
	if err := d.waitUp(ctx, r, port); err != nil {
		if !errors.Is(err, ErrNotLoopback) {
			_ = d.stopRun(context.WithoutCancel(ctx), r, DefaultStopGrace)
		}
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

// health checks that the run's process group listens on loopback only,
// then probes its server.
func (d *procDriver) health(ctx context.Context) (Health, error) {
	d.mu.Lock()
	r, port, alive := d.run, d.port, d.aliveLocked()
	d.mu.Unlock()
	if !alive {
		return HealthDown, ErrNotRunning
	}
	if err := d.checkLoopback(ctx, r); err != nil {
		return HealthDown, err
	}
	return d.probe(ctx, port)
}

// probe asks the server on port for its health the kind's way; a kind
// with no HTTP health is up while its process runs.
func (d *procDriver) probe(ctx context.Context, port int) (Health, error) {
	if d.kind.probe == nil {
		return HealthUp, nil
	}
	return d.kind.probe(ctx, d.client, d.spec, fmt.Sprintf("http://127.0.0.1:%d", port))
}

// checkLoopback stops run and returns ErrNotLoopback if its process group
// listens beyond loopback.
func (d *procDriver) checkLoopback(ctx context.Context, r *procRun) error {
	if d.listeners == nil {
		return nil
	}
	addrs, err := d.listeners(r.pid)
	if err != nil {
		// The check cannot be made: the server is not trusted as up.
		return fmt.Errorf("check listeners: %w", err)
	}
	if len(addrs) == 0 {
		return nil
	}
	d.exposed(addrs)
	d.log.Warn("managed server listens beyond loopback, stopping it",
		zap.Int("pid", r.pid), zap.Stringers("addrs", addrs))
	if err := d.stopRun(ctx, r, DefaultStopGrace); err != nil {
		return fmt.Errorf("%w: listened on %v; stop: %w", ErrNotLoopback, addrs, err)
	}
	return fmt.Errorf("%w: the server listened on %v and was stopped", ErrNotLoopback, addrs)
}

// waitUp polls the run's health until it is up, the process exits, or ctx
// or the start timeout ends.
func (d *procDriver) waitUp(ctx context.Context, r *procRun, port int) error {
	ctx, cancel := context.WithTimeout(ctx, d.spec.StartTimeout)
	defer cancel()
	t := time.NewTimer(0)
	defer t.Stop()
	began := time.Now()
	var last error
	for {
		select {
		case <-r.done:
			return fmt.Errorf("%w before its server came up: %s%s", ErrExited, r.status, lastOutput(r))
		case <-ctx.Done():
			return fmt.Errorf("server not up: %w (last: %v)", ctx.Err(), last)
		case <-t.C:
		}
		h, err := d.probe(ctx, port)
		if h == HealthUp {
			return d.checkLoopback(ctx, r)
		}
		last = err
		t.Reset(startPoll(time.Since(began)))
	}
}

// startPoll is the pause before the next health check of a server that
// has been starting for elapsed: often at first, when most servers come
// up, less often later, never more than startPollSlow, so a server is
// noticed within that of being ready without hammering one that loads a
// large model for minutes.
func startPoll(elapsed time.Duration) time.Duration {
	switch {
	case elapsed < startPollFastFor:
		return startPollFast
	case elapsed < startPollMidFor:
		return startPollMid
	}
	return startPollSlow
}

// maxExitOutputBytes bounds the output quoted in the error of a server
// that exited before it came up.
const maxExitOutputBytes = 256

// lastOutput is the last non-empty line the run wrote (stderr first, where
// servers say why they stop), quoted for an error: ` (last output: "...")`,
// or "" when it wrote nothing. The operator reads the reason (a port in
// use, a missing model file) in the refusal, not only in the logs.
func lastOutput(r *procRun) string {
	for _, b := range []*tailBuffer{r.stderr, r.stdout} {
		line := lastLine(b.Bytes())
		if line == "" {
			continue
		}
		if len(line) > maxExitOutputBytes {
			line = line[len(line)-maxExitOutputBytes:]
		}
		return fmt.Sprintf(" (last output: %q)", line)
	}
	return ""
}

// lastLine is the last line of b with text, without its surrounding space.
func lastLine(b []byte) string {
	for len(b) > 0 {
		b = bytes.TrimRight(b, " \t\r\n")
		i := bytes.LastIndexByte(b, '\n')
		if line := strings.TrimSpace(string(b[i+1:])); line != "" {
			return line
		}
		if i < 0 {
			return ""
		}
		b = b[:i]
	}
	return ""
}

// freeLoopbackPort asks the kernel for a free port on 127.0.0.1. Another
// socket could take it before the server binds it; start then picks
// another (see portRaceAttempts).
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	return port, nil
}

// expand replaces {port}, {dir} and {model_file} in s.
func (d *procDriver) expand(s string, port int) string {
	if !strings.Contains(s, "{") {
		return s
	}
	return strings.NewReplacer("{port}", strconv.Itoa(port), "{dir}", d.spec.Dir,
		"{model_file}", d.modelFile).Replace(s)
}

// spawn starts the process in its own group with its output captured, and
// the goroutines that drain and reap it.
func (d *procDriver) spawn(port int) (*procRun, error) {
	args := make([]string, len(d.argv))
	for i, a := range d.argv {
		args[i] = d.expand(a, port)
		if len(args[i]) > maxSpecArgBytes {
			return nil, fmt.Errorf("argument %d exceeds %d bytes after substitution", i, maxSpecArgBytes)
		}
	}
	env := make([]string, 0, len(d.env)+1)
	for _, kv := range d.env {
		env = append(env, d.expand(kv, port))
	}
	env = append(env, "NODELD_PORT="+strconv.Itoa(port))

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd := exec.Command(d.command, args...)
	cmd.Dir = d.spec.Dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = procAttr()
	var (
		started func(int) error
		ended   func() bool
	)
	if d.launcher != nil {
		if started, ended, err = d.launcher.Wrap(cmd); err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, err
		}
		defer closeExtra(cmd)
	}
	err = cmd.Start()
	// The child holds its own copies of the write ends; ours must close so
	// the readers see EOF once the group is gone.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if ended != nil {
			ended() // releases what Wrap holds for a run that never began
		}
		return nil, err
	}
	r := &procRun{
		pid:      cmd.Process.Pid,
		stdout:   newTailBuffer(d.spec.LogCap),
		stderr:   newTailBuffer(d.spec.LogCap),
		done:     make(chan struct{}),
		reported: make(chan struct{}),
		ended:    ended,
	}
	var drain sync.WaitGroup
	drain.Go(func() { _, _ = io.Copy(r.stdout, outR) })
	drain.Go(func() { _, _ = io.Copy(r.stderr, errR) })
	go d.reap(cmd, r, &drain, outR, errR)
	if started != nil {
		if err := started(r.pid); err != nil {
			_ = syscall.Kill(-r.pid, syscall.SIGKILL)
			<-r.done
			return nil, err
		}
	}
	return r, nil
}

// closeExtra closes the parent's copies of the files a Launcher passed
// to the child (the child holds its own once started).
func closeExtra(cmd *exec.Cmd) {
	for _, f := range cmd.ExtraFiles {
		if f != nil {
			_ = f.Close()
		}
	}
}

// reap waits for the process, kills what is left of its group, drains its
// output (bounded by outputDrainTimeout), and publishes the status.
func (d *procDriver) reap(cmd *exec.Cmd, r *procRun, drain *sync.WaitGroup, outR, errR *os.File) {
	werr := cmd.Wait()
	// Descendants must not outlive the leader. ESRCH means none is left.
	_ = syscall.Kill(-r.pid, syscall.SIGKILL)
	oom := false
	if r.ended != nil {
		oom = r.ended()
	}
	drained := make(chan struct{})
	go func() {
		drain.Wait()
		close(drained)
	}()
	t := time.NewTimer(outputDrainTimeout)
	select {
	case <-drained:
	case <-t.C:
	}
	t.Stop()
	outR.Close() // unblocks a reader stuck on a pipe a stray descendant holds
	errR.Close()
	<-drained

	st := ExitStatus{Code: -1, At: d.now(), OOMKilled: oom}
	if ps := cmd.ProcessState; ps != nil {
		st.Code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.Signal = ws.Signal()
		}
	}
	var exitErr *exec.ExitError
	if werr != nil && !errors.As(werr, &exitErr) {
		st.Err = werr
	}
	r.mu.Lock()
	st.Stopped, st.Killed = r.stopped, r.killed
	r.mu.Unlock()
	r.status = st
	close(r.done)
	d.log.Info("managed process ended", zap.Int("pid", r.pid), zap.Stringer("status", st),
		zap.Bool("stopped", st.Stopped))
	d.ended(st)
	close(r.reported)
}

// stop stops the current run, if any.
func (d *procDriver) stop(ctx context.Context, grace time.Duration) error {
	r := d.lastRun()
	if r == nil {
		return nil
	}
	return d.stopRun(ctx, r, grace)
}

// stopRun sends SIGTERM to r's group, SIGKILL after grace or when ctx
// ends, and returns once r is reaped and its status reported (the reaper
// does both without waiting on anything but the Managed's lock).
func (d *procDriver) stopRun(ctx context.Context, r *procRun, grace time.Duration) error {
	select {
	case <-r.done:
		<-r.reported
		return nil
	default:
	}
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	grace = min(grace, maxStopGrace)
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	if err := syscall.Kill(-r.pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop pid %d: SIGTERM: %w", r.pid, err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-r.done:
		<-r.reported
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	r.mu.Lock()
	r.killed = true
	r.mu.Unlock()
	if err := syscall.Kill(-r.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop pid %d: SIGKILL: %w", r.pid, err)
	}
	// A SIGKILLed group dies without help; reap is bounded by
	// outputDrainTimeout after that.
	<-r.reported
	return nil
}

// resolveProgram finds a runtime's server program: name (or def when name
// is "") on PATH when it has no slash, else the absolute path given.
func resolveProgram(name, def string, lookPath func(string) (string, error)) (string, error) {
	if name == "" {
		name = def
	}
	if len(name) > maxPathBytes {
		return "", fmt.Errorf("longer than %d bytes", maxPathBytes)
	}
	if strings.ContainsRune(name, '/') {
		if !filepath.IsAbs(name) {
			return "", fmt.Errorf("%q must be a bare name or an absolute path", name)
		}
		return filepath.Clean(name), nil
	}
	p, err := lookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found: %w", name, err)
	}
	return p, nil
}

// inDir resolves rel against dir and refuses a result outside dir.
func inDir(dir, rel string) (string, error) {
	if len(rel) > maxPathBytes {
		return "", fmt.Errorf("longer than %d bytes", maxPathBytes)
	}
	if filepath.IsAbs(rel) {
		return filepath.Clean(rel), nil
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%q leaves the package directory", rel)
	}
	return filepath.Join(dir, rel), nil
}

// checkExecutable requires a regular file with an execute bit.
func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// ownedFlag returns the first argument that sets one of the flags nodeld
// owns ("--port" or "--port=1"), or "".
func ownedFlag(args []string, owned ...string) string {
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if slices.Contains(owned, name) {
			return name
		}
	}
	return ""
}

// buildEnv checks env and returns it as sorted "K=V" entries with PATH
// defaulted. NODELD_PORT is added per run.
func buildEnv(env map[string]string) ([]string, error) {
	if len(env) > maxSpecEnv {
		return nil, fmt.Errorf("%d environment variables, at most %d", len(env), maxSpecEnv)
	}
	var errs []error
	out := make([]string, 0, len(env)+2)
	for k, v := range env {
		switch {
		case !grammar.ValidEnvName(k):
			errs = append(errs, fmt.Errorf("env: bad name %q", k))
		case k == "NODELD_PORT":
			errs = append(errs, errors.New("env: NODELD_PORT is set by nodeld"))
		case len(v) > maxEnvValueBytes || strings.IndexByte(v, 0) >= 0:
			errs = append(errs, fmt.Errorf("env %s: longer than %d bytes or holds NUL", k, maxEnvValueBytes))
		default:
			out = append(out, k+"="+v)
		}
	}
	if _, ok := env["PATH"]; !ok {
		out = append(out, "PATH="+defaultPath)
	}
	slices.Sort(out)
	return out, errors.Join(errs...)
}
