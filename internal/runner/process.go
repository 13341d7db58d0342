package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// procRun is one run of a managed process.
type procRun struct {
	pid            int
	stdout, stderr *tailBuffer
	// done is closed once the process is reaped, its group killed, its
	// output drained and status set.
	done   chan struct{}
	status ExitStatus
	// mu guards stopped and killed, set by Stop before it signals.
	mu              sync.Mutex
	stopped, killed bool
}

// startProcess spawns a run and waits for its server to come up.
func (m *Managed) startProcess(ctx context.Context) error {
	port := m.spec.Port
	if port == 0 {
		p, err := freeLoopbackPort()
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		port = p
	}
	r, err := m.spawn(port)
	if err != nil {
		return fmt.Errorf("start %s: %w", m.command, err)
	}
	m.mu.Lock()
	m.run, m.port = r, port
	m.mu.Unlock()
	m.log.Info("managed process started", zap.String("kind", string(m.spec.Kind)),
		zap.Int("pid", r.pid), zap.Int("port", port))
	if m.spec.Kind == KindProcess && m.spec.HealthPath == "" {
		return nil
	}
	if err := m.waitUp(ctx, r, port); err != nil {
		if !errors.Is(err, ErrNotLoopback) {
			_ = m.stopRun(context.WithoutCancel(ctx), r, DefaultStopGrace)
		}
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

// waitUp polls the run's health until it is up, the process exits, or ctx
// or the start timeout ends.
func (m *Managed) waitUp(ctx context.Context, r *procRun, port int) error {
	ctx, cancel := context.WithTimeout(ctx, m.spec.StartTimeout)
	defer cancel()
	t := time.NewTimer(0)
	defer t.Stop()
	var last error
	for {
		select {
		case <-r.done:
			return fmt.Errorf("%w before its server came up: %s", ErrExited, r.status)
		case <-ctx.Done():
			return fmt.Errorf("server not up: %w (last: %v)", ctx.Err(), last)
		case <-t.C:
		}
		h, err := m.probe(ctx, port)
		if h == HealthUp {
			return m.checkLoopback(ctx, r)
		}
		last = err
		t.Reset(startPollInterval)
	}
}

// freeLoopbackPort asks the kernel for a free port on 127.0.0.1. Another
// process could take it before the server binds it; the server then fails
// to start and the run ends.
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
func (m *Managed) expand(s string, port int) string {
	if !strings.Contains(s, "{") {
		return s
	}
	return strings.NewReplacer("{port}", strconv.Itoa(port), "{dir}", m.spec.Dir,
		"{model_file}", m.modelFile).Replace(s)
}

// spawn starts the process in its own group with its output captured, and
// the goroutines that drain and reap it.
func (m *Managed) spawn(port int) (*procRun, error) {
	args := make([]string, len(m.argv))
	for i, a := range m.argv {
		args[i] = m.expand(a, port)
		if len(args[i]) > maxSpecArgBytes {
			return nil, fmt.Errorf("argument %d exceeds %d bytes after substitution", i, maxSpecArgBytes)
		}
	}
	env := make([]string, 0, len(m.env)+1)
	for _, kv := range m.env {
		env = append(env, m.expand(kv, port))
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
	cmd := exec.Command(m.command, args...)
	cmd.Dir = m.spec.Dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = procAttr()
	err = cmd.Start()
	// The child holds its own copies of the write ends; ours must close so
	// the readers see EOF once the group is gone.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	r := &procRun{
		pid:    cmd.Process.Pid,
		stdout: newTailBuffer(m.spec.LogCap),
		stderr: newTailBuffer(m.spec.LogCap),
		done:   make(chan struct{}),
	}
	var drain sync.WaitGroup
	drain.Go(func() { _, _ = io.Copy(r.stdout, outR) })
	drain.Go(func() { _, _ = io.Copy(r.stderr, errR) })
	go m.reap(cmd, r, &drain, outR, errR)
	return r, nil
}

// reap waits for the process, kills what is left of its group, drains its
// output (bounded by outputDrainTimeout), and publishes the status.
func (m *Managed) reap(cmd *exec.Cmd, r *procRun, drain *sync.WaitGroup, outR, errR *os.File) {
	werr := cmd.Wait()
	// Descendants must not outlive the leader. ESRCH means none is left.
	_ = syscall.Kill(-r.pid, syscall.SIGKILL)
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

	st := ExitStatus{Code: -1, At: m.now()}
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
	m.log.Info("managed process ended", zap.Int("pid", r.pid), zap.Stringer("status", st),
		zap.Bool("stopped", st.Stopped))
	m.ended(st)
}

// stopProcess stops the current run, if any.
func (m *Managed) stopProcess(ctx context.Context, grace time.Duration) error {
	m.mu.Lock()
	r := m.run
	m.mu.Unlock()
	if r == nil {
		return nil
	}
	return m.stopRun(ctx, r, grace)
}

// stopRun sends SIGTERM to r's group, SIGKILL after grace or when ctx
// ends, and returns once r is reaped.
func (m *Managed) stopRun(ctx context.Context, r *procRun, grace time.Duration) error {
	select {
	case <-r.done:
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
	<-r.done
	return nil
}
