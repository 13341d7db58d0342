package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/grammar"
)

// KindProcess is any command from a package manifest, supervised as a
// process (services, and the echo-llm test server). It is a managed-only
// kind: adopted instances cannot name it.
const KindProcess Kind = grammar.RuntimeProcess

// DefaultOllamaURL is the Ollama daemon a managed ollama instance drives
// when its Spec names none.
const DefaultOllamaURL = "http://127.0.0.1:11434"

// defaultPath is the PATH given to a managed process whose Spec sets none:
// nodeld's own environment is never forwarded.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// Errors of managed runtimes.
var (
	// ErrInvalidSpec wraps every problem NewManaged finds in a Spec.
	ErrInvalidSpec = errors.New("invalid managed runtime spec")
	// ErrAlreadyStarted is returned by Start while a run is in progress.
	ErrAlreadyStarted = errors.New("managed instance already started")
	// ErrNotRunning is returned by Health when no run is in progress.
	ErrNotRunning = errors.New("managed instance not running")
	// ErrExited is returned by Start when the process exits before its
	// server came up.
	ErrExited = errors.New("managed process exited")
)

// Spec describes one managed instance, as the host builds it from a
// package manifest.
type Spec struct {
	// Kind is KindProcess, KindLlamaCpp, KindOllama or KindMLXLM.
	Kind Kind
	// Dir is the package directory, an absolute path: the working
	// directory of the process, and the base of relative Command and
	// ModelFile paths (which may not leave it). Unused by ollama.
	Dir string
	// Command is the program. process: required, absolute or relative to
	// Dir. llama.cpp and mlx-lm: "" means llama-server or mlx_lm.server
	// found with LookPath; a bare name is looked up the same way, a path
	// must be absolute. ollama: must be empty.
	Command string
	// Args are extra arguments. "{port}", "{dir}" and "{model_file}" are
	// replaced by the run's port, Dir and the resolved ModelFile. For
	// llama.cpp and mlx-lm they follow the arguments nodeld owns (model,
	// host, port), which they may not repeat. ollama: must be empty.
	Args []string
	// Env is the environment of the process, substituted like Args, plus
	// NODELD_PORT (the run's port) and PATH (defaultPath unless Env sets
	// it). Nothing else is inherited from nodeld. ollama: must be empty.
	Env map[string]string
	// ModelFile is the weights file (llama.cpp: required, the GGUF file;
	// mlx-lm: optional model directory), absolute or relative to Dir.
	ModelFile string
	// Model is the model name the server serves (ollama: required, the tag
	// to load). Checked against the server's model list when set.
	Model string
	// Port is the loopback port the server listens on; 0 picks a free one
	// for each run. ollama: ignored (the daemon's URL has the port).
	Port int
	// HealthPath is the HTTP path probed for a process server (200 up, 503
	// loading); "" means no HTTP health, process liveness only. Other kinds
	// are probed the way their runtime answers.
	HealthPath string
	// URL is the Ollama daemon (ollama only); "" means DefaultOllamaURL. It
	// must be a loopback http URL.
	URL string
	// LogCap is the bytes kept per output stream; 0 means DefaultLogCap.
	LogCap int
	// StartTimeout bounds Start's wait for the server's health; 0 means
	// DefaultStartTimeout.
	StartTimeout time.Duration
}

// ManagedDeps are a Managed's collaborators.
type ManagedDeps struct {
	// Logger receives process lifecycle events; nil means no logging.
	Logger *zap.Logger
	// Now is the clock of exit times; nil means time.Now.
	Now func() time.Time
	// LookPath resolves llama-server and mlx_lm.server; nil means
	// exec.LookPath.
	LookPath func(file string) (string, error)
	// Listeners returns the TCP listeners of process group pgid that are
	// not bound to loopback; nil means reading /proc (Linux). Elsewhere
	// there is no /proc and the check is skipped unless this is set.
	Listeners func(pgid int) ([]netip.AddrPort, error)
	// FreePort picks the loopback port of a server whose spec names none;
	// nil means asking the kernel for a free one.
	FreePort func() (int, error)
	// Launcher, when set, wraps the command of every run of a process
	// kind (the host's isolation: internal/sandbox); nil starts it as is.
	Launcher Launcher
}

// Launcher wraps a managed process's command before it starts. Wrap may
// rewrite cmd (program, arguments, environment, extra files,
// credentials); started is called with the pid once cmd has started (an
// error kills the process and fails the start), and ended once it is
// reaped (or once cmd failed to start), reporting whether the kernel
// killed it for exceeding its memory limit.
type Launcher interface {
	Wrap(cmd *exec.Cmd) (started func(pid int) error, ended func() (oomKilled bool), err error)
}

// ExitStatus is how a managed run ended.
type ExitStatus struct {
	// Code is the exit code, or -1 when the process was killed by a
	// signal or never ran.
	Code int
	// Signal is the signal that killed the process, 0 if none.
	Signal syscall.Signal
	// Stopped is true when the run was ended by Stop (or by the loopback
	// refusal), not by the process itself.
	Stopped bool
	// Killed is true when Stop had to SIGKILL the group after the grace.
	Killed bool
	// At is when the run ended.
	At time.Time
	// Err is a wait error, if any.
	Err error
	// OOMKilled is true when the kernel killed a process of the run for
	// exceeding its memory limit (Launcher's cgroup).
	OOMKilled bool
}

// ReasonOOMKilled ends the String of a run the kernel killed for its
// memory: the reason an operator and a controller read.
const ReasonOOMKilled = "oom_killed"

// String describes the status for logs and reasons.
func (s ExitStatus) String() string {
	switch {
	case s.OOMKilled:
		return fmt.Sprintf("killed by the kernel for exceeding its memory limit (%s)", ReasonOOMKilled)
	case s.Signal != 0:
		return fmt.Sprintf("killed by signal %s", s.Signal)
	case s.Err != nil:
		return fmt.Sprintf("wait: %v", s.Err)
	default:
		return fmt.Sprintf("exited with code %d", s.Code)
	}
}

// Managed is one instance nodeld starts, observes and stops. See the package
// documentation for its contract.
//
// Managed keeps what every kind shares (one start at a time, the loopback
// refusal, the waiters for a run's end) and hands the rest to its driver.
type Managed struct {
	kind Kind
	drv  driver

	// mu guards the fields below. It is never held across process waits or
	// network I/O. It may be held while calling the driver's endpoint,
	// never its other methods; a driver never calls back into Managed with
	// its own lock held.
	mu sync.Mutex
	// starting is true while Start is launching or loading.
	starting bool
	// exposed holds the addresses found listening beyond loopback; once
	// set, Start refuses.
	exposed []netip.AddrPort
	// last is the last ended run's status; waiters wait for the next end.
	last    *ExitStatus
	waiters []chan ExitStatus
}

// driver runs a Managed's server the way its runtime kind needs. newDriver
// builds one per kind; Managed is its only consumer.
type driver interface {
	// start begins a run and returns once the server is up, or has been
	// stopped again because it did not come up. Managed calls it only
	// when no run is in progress, one call at a time.
	start(ctx context.Context) error
	// stop ends the current run, if any, and reports its end through
	// driverDeps.ended; with no run in progress it does nothing.
	stop(ctx context.Context, grace time.Duration) error
	// health probes the current run (ErrNotRunning when there is none).
	health(ctx context.Context) (Health, error)
	// endpoint returns the server's base URL ("" before it has one) and
	// whether a run is in progress. It does no I/O.
	endpoint() (base string, alive bool)
	// lastRun returns the current or last process run, nil before the
	// first one and for kinds that run no process.
	lastRun() *procRun
}

// driverDeps are what a Managed gives its driver.
type driverDeps struct {
	log      *zap.Logger
	now      func() time.Time
	client   *http.Client // the probe client
	lookPath func(file string) (string, error)
	// listeners is ManagedDeps.Listeners, defaulted; nil skips the check.
	listeners func(pgid int) ([]netip.AddrPort, error)
	// ended reports how a run ended, once per run, after the driver's
	// state shows the run over.
	ended func(ExitStatus)
	// exposed records listeners found beyond loopback; every later Start
	// refuses.
	exposed func([]netip.AddrPort)
	// freePort is ManagedDeps.FreePort, defaulted.
	freePort func() (int, error)
	// launcher is ManagedDeps.Launcher; nil starts commands as they are.
	launcher Launcher
}

// newDriver is the one place a runtime kind maps to its driver: adding a
// runtime is adding a driver (or, for a server program, a procKind) and a
// case here. It reports every problem of spec for that kind at once.
func newDriver(spec Spec, deps driverDeps) (driver, error) {
	switch spec.Kind {
	case KindProcess:
		return newProcDriver(spec, processKind(spec.HealthPath), deps)
	case KindLlamaCpp:
		return newProcDriver(spec, llamaCppKind(), deps)
	case KindMLXLM:
		return newProcDriver(spec, mlxLMKind(), deps)
	case KindOllama:
		return newOllamaDriver(spec, deps)
	default:
		return nil, fmt.Errorf("%w %q (want %s)", ErrUnknownKind, spec.Kind, strings.Join(grammar.RunnableRuntimes(), ", "))
	}
}

// NewManaged validates spec and resolves its command. It starts nothing.
func NewManaged(spec Spec, deps ManagedDeps) (*Managed, error) {
	dd := driverDeps{
		log:       deps.Logger,
		now:       deps.Now,
		client:    NewProbeClient(DefaultProbeTimeout),
		lookPath:  deps.LookPath,
		listeners: deps.Listeners,
		freePort:  deps.FreePort,
		launcher:  deps.Launcher,
	}
	if dd.freePort == nil {
		dd.freePort = freeLoopbackPort
	}
	if dd.log == nil {
		dd.log = zap.NewNop()
	}
	if dd.now == nil {
		dd.now = time.Now
	}
	if dd.lookPath == nil {
		dd.lookPath = exec.LookPath
	}
	if dd.listeners == nil && isLinux {
		dd.listeners = procFS{root: "/proc"}.groupListeners
	}
	if spec.LogCap == 0 {
		spec.LogCap = DefaultLogCap
	}
	if spec.StartTimeout == 0 {
		spec.StartTimeout = DefaultStartTimeout
	}
	m := &Managed{kind: spec.Kind}
	dd.ended, dd.exposed = m.ended, m.expose
	drv, err := newDriver(spec, dd)
	if err := errors.Join(checkSpec(spec), err); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	m.drv = drv
	return m, nil
}

// checkSpec checks what every kind's Spec shares, reporting every problem
// at once.
func checkSpec(spec Spec) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if spec.LogCap < 0 || spec.LogCap > maxLogCap {
		bad("log cap %d outside 1..%d", spec.LogCap, maxLogCap)
	}
	if spec.StartTimeout < 0 || spec.StartTimeout > maxStartTimeout {
		bad("start timeout %s outside 0..%s", spec.StartTimeout, maxStartTimeout)
	}
	if spec.Model != "" && !validModelName(spec.Model) {
		bad("bad model name %q", spec.Model)
	}
	if spec.Port < 0 || spec.Port > 65535 {
		bad("port %d outside 0..65535", spec.Port)
	}
	return errors.Join(errs...)
}

// Kind returns the instance's runtime kind.
func (m *Managed) Kind() Kind { return m.kind }

// Endpoint returns the base URL of the instance's server,
// http://127.0.0.1:<port> (for ollama, the daemon's URL), and whether the
// instance is alive.
func (m *Managed) Endpoint() (string, bool) { return m.drv.endpoint() }

// Alive reports whether a run is in progress: the process has not exited
// (ollama: the model is loaded by this instance).
func (m *Managed) Alive() bool {
	_, alive := m.drv.endpoint()
	return alive
}

// PID returns the process id of the current or last run (also its process
// group id), 0 if none (and always for ollama).
func (m *Managed) PID() int {
	if r := m.drv.lastRun(); r != nil {
		return r.pid
	}
	return 0
}

// Logs returns the last run's stdout and stderr: at most the Spec's LogCap
// bytes each, the newest kept, the front cut on a UTF-8 boundary. Both are
// nil before the first run and for ollama.
func (m *Managed) Logs() (stdout, stderr []byte) {
	r := m.drv.lastRun()
	if r == nil {
		return nil, nil
	}
	return r.stdout.Bytes(), r.stderr.Bytes()
}

// Wait returns a channel that receives how the current run ended, once it
// has, and is then closed. When no run is in progress it receives the last
// run's status at once (or, before any run, the end of the next one).
func (m *Managed) Wait() <-chan ExitStatus {
	ch := make(chan ExitStatus, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	_, alive := m.drv.endpoint()
	if !m.starting && !alive && m.last != nil {
		ch <- *m.last
		close(ch)
		return ch
	}
	m.waiters = append(m.waiters, ch)
	return ch
}

// ended records st as the last status and hands it to the waiters.
func (m *Managed) ended(st ExitStatus) {
	m.mu.Lock()
	m.last = &st
	ws := m.waiters
	m.waiters = nil
	m.mu.Unlock()
	for _, ch := range ws {
		ch <- st // size 1, one send each: never blocks
		close(ch)
	}
}

// expose records listeners found beyond loopback: every later Start
// refuses.
func (m *Managed) expose(addrs []netip.AddrPort) {
	m.mu.Lock()
	m.exposed = addrs
	m.mu.Unlock()
}

// Start launches the instance's server (ollama: loads its model) and, for
// servers with an HTTP health, waits until it is up, bounded by ctx and the
// Spec's StartTimeout. A server found listening beyond loopback is stopped
// and Start returns an error wrapping ErrNotLoopback; so does every later
// Start. If the server does not come up, it is stopped and the error says
// why (ErrExited when the process ended by itself).
func (m *Managed) Start(ctx context.Context) error {
	m.mu.Lock()
	_, alive := m.drv.endpoint()
	switch {
	case m.exposed != nil:
		m.mu.Unlock()
		return fmt.Errorf("start: %w: the server listened on %v", ErrNotLoopback, m.exposed)
	case m.starting || alive:
		m.mu.Unlock()
		return ErrAlreadyStarted
	}
	m.starting = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.starting = false
		m.mu.Unlock()
	}()
	return m.drv.start(ctx)
}

// Stop ends the current run: for a process, SIGTERM to its process group,
// then SIGKILL to the group after grace (0 means DefaultStopGrace, capped
// at 60 s) or when ctx ends, whichever is first; it returns once the
// process has been reaped and its status is the last one (Wait answers at
// once). For ollama it unloads the model if this instance
// loaded it. Stop with no run in progress does nothing and returns nil.
func (m *Managed) Stop(ctx context.Context, grace time.Duration) error {
	return m.drv.stop(ctx, grace)
}

// Health probes the instance. For a process it first checks that the
// process group listens on loopback only (on a finding it stops the
// process and returns an error wrapping ErrNotLoopback), then probes the
// server the way its runtime answers (process: GET HealthPath, 200 up, 503
// loading; none means up while alive). err is non-nil exactly when the
// Health is not up.
func (m *Managed) Health(ctx context.Context) (Health, error) {
	return m.drv.health(ctx)
}
