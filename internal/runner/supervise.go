package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// State is a supervised instance's lifecycle state. The names are the
// instance states of the workload.ctl protocol (reference 4.3) that a host
// reports.
type State string

// Supervisor states.
const (
	// StateStarting: Run is starting the instance for the first time.
	StateStarting State = "starting"
	// StateRunning: the instance is up.
	StateRunning State = "running"
	// StateUnhealthy: a health check got an answer that the instance is
	// not up (it is watched on, and is running again at the next check
	// that finds it up), or it exited or missed MissLimit health checks
	// in a row (a restart is pending its backoff).
	StateUnhealthy State = "unhealthy"
	// StateRestarting: the instance is being stopped and started again.
	StateRestarting State = "restarting"
	// StateStopped: Run ended because it was asked to; the instance is
	// stopped.
	StateStopped State = "stopped"
	// StateFailed: the restart budget is spent or the server listened
	// beyond loopback; the instance is stopped and held for the operator.
	StateFailed State = "failed"
)

// Errors of supervision. Supervisor.Cause wraps one of them (or
// ErrExited, ErrNotLoopback) to say why the instance left running, so a
// caller can report a stable reason without reading the text.
var (
	// ErrSupervisorRunning is returned by a second concurrent call to Run.
	ErrSupervisorRunning = errors.New("supervisor already running")
	// ErrRestartBudget: the restart budget is spent; the instance failed.
	ErrRestartBudget = errors.New("restart budget spent")
	// ErrHealthCheck: a health check found the instance not up, or
	// MissLimit checks in a row got no answer.
	ErrHealthCheck = errors.New("health check failed")
	// ErrStartFailed: a start the Supervisor made failed.
	ErrStartFailed = errors.New("start failed")
)

// RestartPolicy bounds restarts: at most Max within any Window, the k-th
// (0-based) of them waiting Backoff·2^k, at most MaxBackoff, after the
// failure it answers.
type RestartPolicy struct {
	// Max restarts within Window; 0 never restarts.
	Max int
	// Window is how far back restarts are counted.
	Window time.Duration
	// Backoff is the wait before the first restart in the window.
	Backoff time.Duration
	// MaxBackoff caps the doubling wait.
	MaxBackoff time.Duration
}

// DefaultRestartPolicy is 5 restarts in 10 minutes, waiting 2 s doubling to
// at most 30 s (2, 4, 8, 16 and 30 s): with the default health checks a
// model server that is down for a minute is restarted in time, where a
// budget spent within seconds would leave the instance failed through an
// outage as short as a daemon's restart.
func DefaultRestartPolicy() RestartPolicy {
	return RestartPolicy{Max: 5, Window: 10 * time.Minute, Backoff: 2 * time.Second, MaxBackoff: 30 * time.Second}
}

// Validate reports every problem with p.
func (p RestartPolicy) Validate() error {
	var errs []error
	if p.Max < 0 || p.Max > maxRestartsBound {
		errs = append(errs, fmt.Errorf("max restarts %d outside 0..%d", p.Max, maxRestartsBound))
	}
	if p.Window <= 0 {
		errs = append(errs, fmt.Errorf("restart window %s is not positive", p.Window))
	}
	if p.Backoff <= 0 || p.MaxBackoff < p.Backoff {
		errs = append(errs, fmt.Errorf("backoff %s must be positive and at most max backoff %s", p.Backoff, p.MaxBackoff))
	}
	return errors.Join(errs...)
}

// RestartDecision is what RestartPolicy.Next decided.
type RestartDecision struct {
	// Recent is the number of past restarts within the window.
	Recent int
	// Exhausted is true when Recent reached Max: no restart.
	Exhausted bool
	// Delay is the wait before the restart when not exhausted.
	Delay time.Duration
}

// Next decides whether a failure at now may be answered by a restart,
// given the times of past restarts, and after which delay. It is a pure
// function of its arguments.
func (p RestartPolicy) Next(past []time.Time, now time.Time) RestartDecision {
	var d RestartDecision
	for _, t := range past {
		if now.Sub(t) < p.Window {
			d.Recent++
		}
	}
	if d.Recent >= p.Max {
		d.Exhausted = true
		return d
	}
	d.Delay = p.Backoff
	for range d.Recent {
		if d.Delay >= p.MaxBackoff/2 {
			d.Delay = p.MaxBackoff
			break
		}
		d.Delay *= 2
	}
	d.Delay = min(d.Delay, p.MaxBackoff)
	return d
}

// Instance is what a Supervisor supervises; *Managed implements it.
type Instance interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context, grace time.Duration) error
	Health(ctx context.Context) (Health, error)
	Wait() <-chan ExitStatus
}

var _ Instance = (*Managed)(nil)

// SupervisorConfig configures a Supervisor. Zero fields take defaults.
type SupervisorConfig struct {
	// Policy bounds restarts; the zero value means DefaultRestartPolicy.
	Policy RestartPolicy
	// HealthInterval is the time between health checks; zero means
	// DefaultHealthInterval.
	HealthInterval time.Duration
	// MissLimit is how many failed checks in a row make the instance
	// unhealthy; zero means DefaultMissLimit.
	MissLimit int
	// HealthTimeout bounds one health check; zero means DefaultProbeTimeout.
	HealthTimeout time.Duration
	// StopGrace is the grace of the stops the Supervisor makes; zero means
	// DefaultStopGrace.
	StopGrace time.Duration
}

// SupervisorDeps are a Supervisor's collaborators; nil fields take the
// real ones.
type SupervisorDeps struct {
	// Logger receives state changes.
	Logger *zap.Logger
	// Now is the clock restarts are counted with.
	Now func() time.Time
	// Ticks returns the health-check ticks every d and a func that stops
	// them.
	Ticks func(d time.Duration) (<-chan time.Time, func())
	// After returns a channel that fires once d has passed (the backoff).
	After func(d time.Duration) <-chan time.Time
	// OnChange is called on every state change, from Run's goroutine and
	// with no lock held, so the host can register the instance's role
	// while it is running and deregister it otherwise.
	OnChange func(State, Health)
}

// Supervisor keeps one Instance running: it starts it, checks its health
// every HealthInterval, and restarts it within its RestartPolicy when it
// exits or misses MissLimit checks in a row; when the budget is spent it is
// failed. See the package documentation.
type Supervisor struct {
	inst    Instance
	cfg     SupervisorConfig
	log     *zap.Logger
	now     func() time.Time
	ticks   func(time.Duration) (<-chan time.Time, func())
	after   func(time.Duration) <-chan time.Time
	change  func(State, Health)
	running atomic.Bool

	// mu guards the fields below.
	mu       sync.Mutex
	state    State
	restarts int
	reason   string
	cause    error
	cancel   context.CancelFunc
	stopped  bool
}

// NewSupervisor validates cfg and returns a Supervisor of inst that starts
// nothing until Run.
func NewSupervisor(inst Instance, cfg SupervisorConfig, deps SupervisorDeps) (*Supervisor, error) {
	if inst == nil {
		return nil, errors.New("new supervisor: nil instance")
	}
	if cfg.Policy == (RestartPolicy{}) {
		cfg.Policy = DefaultRestartPolicy()
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = DefaultHealthInterval
	}
	if cfg.MissLimit == 0 {
		cfg.MissLimit = DefaultMissLimit
	}
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = DefaultProbeTimeout
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	errs := []error{cfg.Policy.Validate()}
	if cfg.HealthInterval < minHealthInterval {
		errs = append(errs, fmt.Errorf("health interval %s is shorter than %s", cfg.HealthInterval, minHealthInterval))
	}
	if cfg.MissLimit < 1 || cfg.MissLimit > maxMissLimit {
		errs = append(errs, fmt.Errorf("miss limit %d outside 1..%d", cfg.MissLimit, maxMissLimit))
	}
	if cfg.HealthTimeout < 0 || cfg.StopGrace < 0 || cfg.StopGrace > maxStopGrace {
		errs = append(errs, fmt.Errorf("health timeout %s or stop grace %s out of range", cfg.HealthTimeout, cfg.StopGrace))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("new supervisor: %w", err)
	}
	s := &Supervisor{inst: inst, cfg: cfg, log: deps.Logger, now: deps.Now, ticks: deps.Ticks,
		after: deps.After, change: deps.OnChange, state: StateStopped}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.ticks == nil {
		s.ticks = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	if s.after == nil {
		s.after = time.After
	}
	if s.change == nil {
		s.change = func(State, Health) {}
	}
	return s, nil
}

// State returns the current state, the restarts made by the current (or
// last) Run, and why the state was entered.
func (s *Supervisor) State() (state State, restarts int, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.restarts, s.reason
}

// Cause returns the error behind the current state when the instance is
// not running (nil while starting, running or stopped): it wraps
// ErrRestartBudget or ErrNotLoopback when failed, else ErrHealthCheck,
// ErrExited or ErrStartFailed.
func (s *Supervisor) Cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

// Stop makes Run stop the instance and return, cancelling any pending
// restart. It does not wait; Run's caller does.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.cancel != nil {
		s.cancel()
	}
}

// set enters st for reason (cause: the error behind it, nil for starting,
// running and stopped) and reports it. A change for the worse (unhealthy,
// restarting, failed) is logged at warn: an operator reading warnings
// sees the instance leave running and why.
func (s *Supervisor) set(st State, h Health, reason string, cause error) {
	s.mu.Lock()
	from := s.state
	s.state, s.reason, s.cause = st, reason, cause
	s.mu.Unlock()
	log := s.log.Info
	if worse(st) {
		log = s.log.Warn
	}
	log("managed instance state", zap.String("from", string(from)), zap.String("to", string(st)),
		zap.String("health", string(h)), zap.String("reason", reason))
	s.change(st, h)
}

// worse reports whether st is a state an instance is in because something
// went wrong.
func worse(st State) bool {
	return st == StateUnhealthy || st == StateRestarting || st == StateFailed
}

// Run starts the instance and supervises it until ctx ends or Stop is
// called (the instance is then stopped and the state is stopped), or until
// the instance fails (stopped, state failed). It returns nil in every case
// but a second concurrent Run; each Run gets a fresh restart budget. All
// its work happens on the calling goroutine.
func (s *Supervisor) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrSupervisorRunning
	}
	defer s.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.stopped {
		cancel()
		s.stopped = false
	}
	s.cancel, s.restarts = cancel, 0
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
	}()

	tick, stopTick := s.ticks(s.cfg.HealthInterval)
	defer stopTick()
	var history []time.Time
	s.set(StateStarting, HealthUnknown, "start", nil)
	err := s.start(ctx)
	for ctx.Err() == nil {
		if err == nil {
			s.set(StateRunning, HealthUp, "started", nil)
			if err = s.watch(ctx, tick); err == nil {
				break // ctx ended
			}
		}
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, ErrNotLoopback) {
			s.fail(ctx, err.Error(), err)
			return nil
		}
		now := s.now()
		d := s.cfg.Policy.Next(history, now)
		if d.Exhausted {
			cause := fmt.Errorf("%w (%d in %s): %w", ErrRestartBudget, s.cfg.Policy.Max, s.cfg.Policy.Window, err)
			s.fail(ctx, cause.Error(), cause)
			return nil
		}
		s.set(StateUnhealthy, HealthDown, err.Error(), err)
		select {
		case <-ctx.Done():
			continue
		case <-s.after(d.Delay):
		}
		history = append(pruneBefore(history, now.Add(-s.cfg.Policy.Window)), s.now())
		s.mu.Lock()
		s.restarts++
		n := s.restarts
		s.mu.Unlock()
		s.set(StateRestarting, HealthDown, fmt.Sprintf("restart %d/%d: %v", d.Recent+1, s.cfg.Policy.Max, err), err)
		if serr := s.stopInstance(ctx); serr != nil {
			s.log.Warn("stop before restart", zap.Error(serr))
		}
		if err = s.start(ctx); err == nil {
			s.log.Info("managed instance restarted", zap.Int("restarts", n))
		}
	}
	if err := s.stopInstance(context.WithoutCancel(ctx)); err != nil {
		s.log.Warn("stop on shutdown", zap.Error(err))
	}
	s.set(StateStopped, HealthDown, "stopped", nil)
	return nil
}

// start starts the instance; its error wraps ErrStartFailed (and what the
// instance said, ErrNotLoopback included).
func (s *Supervisor) start(ctx context.Context) error {
	if err := s.inst.Start(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrStartFailed, err)
	}
	return nil
}

// watch checks the running instance until ctx ends (nil) or the instance
// exits, misses MissLimit checks in a row, or is refused for listening
// beyond loopback (the reason). Every failed check is logged at warn. One
// that got an answer that the instance is not up (nothing listens, an
// error status, the model gone) makes it unhealthy at once, so its role
// is withdrawn within one HealthInterval of the server's death; one that
// got no answer (a timeout, a reset: a loaded host, not a dead server)
// leaves it running. Either way the MissLimit-th in a row ends the watch,
// and a check that finds it up again makes it running again.
func (s *Supervisor) watch(ctx context.Context, tick <-chan time.Time) error {
	exit := s.inst.Wait()
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case st := <-exit:
			return fmt.Errorf("%w: %s", ErrExited, st)
		case <-tick:
		}
		hctx, cancel := context.WithTimeout(ctx, s.cfg.HealthTimeout)
		h, err := s.inst.Health(hctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrNotLoopback):
			return err
		case h == HealthUp:
			if misses > 0 {
				s.log.Info("managed instance health check passed again", zap.Int("missed", misses))
				if st, _, _ := s.State(); st != StateRunning {
					s.set(StateRunning, HealthUp, "health check passed", nil)
				}
			}
			misses = 0
			continue
		}
		misses++
		if err == nil {
			err = fmt.Errorf("health %s", h)
		}
		cause := fmt.Errorf("%w (%d of %d in a row): %w", ErrHealthCheck, misses, s.cfg.MissLimit, err)
		if misses >= s.cfg.MissLimit {
			return cause
		}
		s.log.Warn("managed instance health check missed", zap.Int("missed", misses),
			zap.Int("miss_limit", s.cfg.MissLimit), zap.String("health", string(h)), zap.Error(err))
		if st, _, _ := s.State(); st == StateRunning && !missed(err) {
			s.set(StateUnhealthy, h, cause.Error(), cause)
		}
	}
}

// fail stops the instance and enters failed.
func (s *Supervisor) fail(ctx context.Context, reason string, cause error) {
	if err := s.stopInstance(context.WithoutCancel(ctx)); err != nil {
		s.log.Warn("stop on failure", zap.Error(err))
	}
	s.set(StateFailed, HealthDown, reason, cause)
}

// stopInstance stops the instance with the configured grace.
func (s *Supervisor) stopInstance(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StopGrace+outputDrainTimeout+time.Second)
	defer cancel()
	return s.inst.Stop(ctx, s.cfg.StopGrace)
}

// pruneBefore drops the times before cut (the list is ascending).
func pruneBefore(ts []time.Time, cut time.Time) []time.Time {
	i := 0
	for i < len(ts) && ts[i].Before(cut) {
		i++
	}
	return ts[i:]
}
