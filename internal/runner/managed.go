package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
}

// String describes the status for logs and reasons.
func (s ExitStatus) String() string {
	switch {
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
type Managed struct {
	spec      Spec
	command   string   // resolved program (process kinds)
	modelFile string   // resolved ModelFile, "" if none
	argv      []string // argument template, before substitution
	env       []string // "K=V" template, sorted, before substitution
	base      string   // ollama daemon base URL
	log       *zap.Logger
	now       func() time.Time
	listeners func(pgid int) ([]netip.AddrPort, error)
	client    *http.Client

	// mu guards the fields below. It is never held across process waits or
	// network I/O.
	mu sync.Mutex
	// run is the current or last process run (process kinds).
	run *procRun
	// starting is true while Start is launching or loading.
	starting bool
	// port is the current or last run's port.
	port int
	// exposed holds the addresses found listening beyond loopback; once
	// set, Start refuses.
	exposed []netip.AddrPort
	// loaded is true while an ollama model is loaded by this instance;
	// ownsLoad is true when this instance asked for the load.
	loaded, ownsLoad bool
	// last is the last ended run's status; waiters wait for the next end.
	last    *ExitStatus
	waiters []chan ExitStatus
}

// NewManaged validates spec and resolves its command. It starts nothing.
func NewManaged(spec Spec, deps ManagedDeps) (*Managed, error) {
	m := &Managed{log: deps.Logger, now: deps.Now, listeners: deps.Listeners}
	if m.log == nil {
		m.log = zap.NewNop()
	}
	if m.now == nil {
		m.now = time.Now
	}
	if m.listeners == nil && isLinux {
		m.listeners = procFS{root: "/proc"}.groupListeners
	}
	lookPath := deps.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	if spec.LogCap == 0 {
		spec.LogCap = DefaultLogCap
	}
	if spec.StartTimeout == 0 {
		spec.StartTimeout = DefaultStartTimeout
	}
	if err := m.resolve(spec, lookPath); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	m.spec = spec
	m.client = NewProbeClient(DefaultProbeTimeout)
	return m, nil
}

// resolve checks spec and fills the resolved fields of m, reporting every
// problem at once.
func (m *Managed) resolve(spec Spec, lookPath func(string) (string, error)) error {
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
	switch spec.Kind {
	case KindOllama:
		if spec.Command != "" || len(spec.Args) > 0 || len(spec.Env) > 0 || spec.ModelFile != "" || spec.HealthPath != "" {
			bad("ollama takes no command, args, env, model file or health path: nodeld drives a running daemon")
		}
		if spec.Model == "" {
			bad("ollama needs a model")
		}
		raw := spec.URL
		if raw == "" {
			raw = DefaultOllamaURL
		}
		ep, err := parseLoopbackURL(raw)
		if err != nil {
			errs = append(errs, err)
		}
		m.base = ep.base
		return errors.Join(errs...)
	case KindProcess, KindLlamaCpp, KindMLXLM:
	default:
		bad("%w %q (want %s)", ErrUnknownKind, spec.Kind, strings.Join(grammar.RunnableRuntimes(), ", "))
		return errors.Join(errs...)
	}
	if spec.URL != "" {
		bad("url is for ollama only")
	}
	if len(spec.Dir) > maxPathBytes || !filepath.IsAbs(spec.Dir) {
		bad("dir %q must be an absolute path", spec.Dir)
		return errors.Join(errs...)
	}
	if fi, err := os.Stat(spec.Dir); err != nil || !fi.IsDir() {
		bad("dir %q is not a directory", spec.Dir)
	}
	if spec.HealthPath != "" && (spec.Kind != KindProcess || !grammar.ValidHealthPath(spec.HealthPath)) {
		bad("health path %q: only for process, and must be /path without query", spec.HealthPath)
	}
	if spec.ModelFile != "" {
		p, err := inDir(spec.Dir, spec.ModelFile)
		if err != nil {
			bad("model file: %w", err)
		} else if _, err := os.Stat(p); err != nil {
			bad("model file: %w", err)
		}
		m.modelFile = p
	}
	m.command, m.argv = m.commandLine(spec, lookPath, bad)
	if len(m.argv) > maxSpecArgs {
		bad("%d arguments, at most %d", len(m.argv), maxSpecArgs)
	}
	for i, a := range spec.Args {
		if len(a) > maxSpecArgBytes || strings.IndexByte(a, 0) >= 0 {
			bad("args[%d]: longer than %d bytes or holds NUL", i, maxSpecArgBytes)
		}
	}
	env, err := buildEnv(spec.Env)
	if err != nil {
		errs = append(errs, err)
	}
	m.env = env
	return errors.Join(errs...)
}

// commandLine resolves the program and builds the argument template.
func (m *Managed) commandLine(spec Spec, lookPath func(string) (string, error), bad func(string, ...any)) (string, []string) {
	var (
		cmd  string
		argv []string
		err  error
	)
	switch spec.Kind {
	case KindProcess:
		if spec.Command == "" {
			bad("process needs a command")
			return "", nil
		}
		if filepath.IsAbs(spec.Command) {
			cmd = filepath.Clean(spec.Command)
		} else if cmd, err = inDir(spec.Dir, spec.Command); err != nil {
			bad("command: %w", err)
			return "", nil
		}
		argv = slices.Clone(spec.Args)
	case KindLlamaCpp:
		if m.modelFile == "" {
			bad("llama.cpp needs a model file")
		}
		cmd, err = resolveProgram(spec.Command, "llama-server", lookPath)
		argv = append([]string{"--model", "{model_file}", "--host", "127.0.0.1", "--port", "{port}"}, spec.Args...)
		if f := ownedFlag(spec.Args, "--model", "-m", "--host", "--port"); f != "" {
			bad("args: %s is set by nodeld", f)
		}
	case KindMLXLM:
		model := "{model_file}"
		switch {
		case m.modelFile != "":
		case spec.Model != "":
			model = spec.Model
		default:
			model = "{dir}"
		}
		cmd, err = resolveProgram(spec.Command, "mlx_lm.server", lookPath)
		argv = append([]string{"--model", model, "--host", "127.0.0.1", "--port", "{port}"}, spec.Args...)
		if f := ownedFlag(spec.Args, "--model", "--host", "--port"); f != "" {
			bad("args: %s is set by nodeld", f)
		}
	}
	if err != nil {
		bad("command: %w", err)
		return "", argv
	}
	if err := checkExecutable(cmd); err != nil {
		bad("command: %w", err)
	}
	return cmd, argv
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

// Kind returns the instance's runtime kind.
func (m *Managed) Kind() Kind { return m.spec.Kind }

// Endpoint returns the base URL of the instance's server,
// http://127.0.0.1:<port> (for ollama, the daemon's URL), and whether the
// instance is alive.
func (m *Managed) Endpoint() (string, bool) {
	if m.spec.Kind == KindOllama {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.base, m.loaded
	}
	m.mu.Lock()
	port, alive := m.port, m.aliveLocked()
	m.mu.Unlock()
	if port == 0 {
		return "", false
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port), alive
}

// Alive reports whether a run is in progress: the process has not exited
// (ollama: the model is loaded by this instance).
func (m *Managed) Alive() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.spec.Kind == KindOllama {
		return m.loaded
	}
	return m.aliveLocked()
}

func (m *Managed) aliveLocked() bool {
	if m.run == nil {
		return false
	}
	select {
	case <-m.run.done:
		return false
	default:
		return true
	}
}

// PID returns the process id of the current or last run (also its process
// group id), 0 if none (and always for ollama).
func (m *Managed) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.run == nil {
		return 0
	}
	return m.run.pid
}

// Logs returns the last run's stdout and stderr: at most the Spec's LogCap
// bytes each, the newest kept, the front cut on a UTF-8 boundary. Both are
// nil before the first run and for ollama.
func (m *Managed) Logs() (stdout, stderr []byte) {
	m.mu.Lock()
	r := m.run
	m.mu.Unlock()
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
	inProgress := m.starting || m.aliveLocked() || (m.spec.Kind == KindOllama && m.loaded)
	if !inProgress && m.last != nil {
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

// Start launches the instance's server (ollama: loads its model) and, for
// servers with an HTTP health, waits until it is up, bounded by ctx and the
// Spec's StartTimeout. A server found listening beyond loopback is stopped
// and Start returns an error wrapping ErrNotLoopback; so does every later
// Start. If the server does not come up, it is stopped and the error says
// why (ErrExited when the process ended by itself).
func (m *Managed) Start(ctx context.Context) error {
	m.mu.Lock()
	switch {
	case m.exposed != nil:
		m.mu.Unlock()
		return fmt.Errorf("start: %w: the server listened on %v", ErrNotLoopback, m.exposed)
	case m.starting || m.aliveLocked() || m.loaded:
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
	if m.spec.Kind == KindOllama {
		return m.ollamaLoad(ctx)
	}
	return m.startProcess(ctx)
}

// Stop ends the current run: for a process, SIGTERM to its process group,
// then SIGKILL to the group after grace (0 means DefaultStopGrace, capped
// at 60 s) or when ctx ends, whichever is first; it returns once the
// process has been reaped. For ollama it unloads the model if this instance
// loaded it. Stop with no run in progress does nothing and returns nil.
func (m *Managed) Stop(ctx context.Context, grace time.Duration) error {
	if m.spec.Kind == KindOllama {
		return m.ollamaUnload(ctx)
	}
	return m.stopProcess(ctx, grace)
}

// Health probes the instance. For a process it first checks that the
// process group listens on loopback only (on a finding it stops the
// process and returns an error wrapping ErrNotLoopback), then probes the
// server the way its runtime answers (process: GET HealthPath, 200 up, 503
// loading; none means up while alive). err is non-nil exactly when the
// Health is not up.
func (m *Managed) Health(ctx context.Context) (Health, error) {
	if m.spec.Kind == KindOllama {
		return m.ollamaHealth(ctx)
	}
	m.mu.Lock()
	r, port, alive := m.run, m.port, m.aliveLocked()
	m.mu.Unlock()
	if !alive {
		return HealthDown, ErrNotRunning
	}
	if err := m.checkLoopback(ctx, r); err != nil {
		return HealthDown, err
	}
	return m.probe(ctx, port)
}

// probe asks the server on port for its health.
func (m *Managed) probe(ctx context.Context, port int) (Health, error) {
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	switch m.spec.Kind {
	case KindLlamaCpp, KindMLXLM:
		res, err := Probe(ctx, m.client, AdoptedInstance{Kind: m.spec.Kind, URL: base, Model: m.spec.Model})
		return res.Health, err
	}
	if m.spec.HealthPath == "" {
		return HealthUp, nil
	}
	status, _, err := prober{c: m.client, base: base}.get(ctx, m.spec.HealthPath)
	switch {
	case err != nil:
		return HealthDown, err
	case status == http.StatusOK:
		return HealthUp, nil
	case status == http.StatusServiceUnavailable:
		return HealthLoading, fmt.Errorf("GET %s: %w", m.spec.HealthPath, errLoading)
	default:
		return HealthDown, fmt.Errorf("GET %s: HTTP %d", m.spec.HealthPath, status)
	}
}

// checkLoopback stops run and returns ErrNotLoopback if its process group
// listens beyond loopback.
func (m *Managed) checkLoopback(ctx context.Context, r *procRun) error {
	if m.listeners == nil {
		return nil
	}
	addrs, err := m.listeners(r.pid)
	if err != nil {
		// The check cannot be made: the server is not trusted as up.
		return fmt.Errorf("check listeners: %w", err)
	}
	if len(addrs) == 0 {
		return nil
	}
	m.mu.Lock()
	m.exposed = addrs
	m.mu.Unlock()
	m.log.Warn("managed server listens beyond loopback, stopping it",
		zap.Int("pid", r.pid), zap.Stringers("addrs", addrs))
	if err := m.stopRun(ctx, r, DefaultStopGrace); err != nil {
		return fmt.Errorf("%w: listened on %v; stop: %w", ErrNotLoopback, addrs, err)
	}
	return fmt.Errorf("%w: the server listened on %v and was stopped", ErrNotLoopback, addrs)
}
