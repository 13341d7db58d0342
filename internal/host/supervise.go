package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/runner"
)

// supervisors owns the processes of the listed instances: it starts an
// instance's process and hands it to a supervisor goroutine, follows the
// supervisor's reports (the role's registration, restarts and failures
// chained), and stops a process after withdrawing its role. Run lends it
// its context (run); every supervisor goroutine is Run's, waited for by
// stopAll.
type supervisors struct {
	config func() Config
	roles  *roles
	jnl    *journal
	met    *metrics
	log    *zap.Logger
	now    func() time.Time
	// stopFault is Deps.StopFault (tests only; nil in the daemon).
	stopFault func(instanceID string) error

	// mu guards runCtx and stopping. It is never held across I/O.
	mu       sync.Mutex
	runCtx   context.Context // nil until Run; then Run's ctx
	stopping bool            // Run is ending: no new supervisors
	wg       sync.WaitGroup  // supervisor goroutines
}

// run lends Run's ctx to the supervisors; a second Run is refused.
func (s *supervisors) run(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runCtx != nil {
		return errors.New("host already running")
	}
	s.runCtx = ctx
	return nil
}

// stopAll ends supervision: no supervisor starts from now on, every
// instance that list returns then is stopped (shutdownGrace), every
// supervisor goroutine is waited for and every role registration
// released.
func (s *supervisors) stopAll(list func() []*instance) {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	// Listed after stopping is set: a place listing an instance later
	// finds its start refused (errNotRunning).
	insts := list()
	for _, in := range insts {
		in.stopSupervisor(shutdownGrace)
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace+5*time.Second)
		if err := in.managed.Stop(ctx, shutdownGrace); err != nil {
			s.log.Warn("stop instance on shutdown", zap.String("instance", in.id), zap.Error(err))
		}
		cancel()
	}
	s.wg.Wait()
	for _, in := range insts {
		s.roles.deregister(in)
	}
}

// errNotRunning: Run has not started or is ending, so nothing can be
// supervised.
var errNotRunning = errors.New("host is not running")

// startRun starts the instance's process and hands it to a supervisor.
// The caller holds in.opMu.
func (s *supervisors) startRun(ctx context.Context, in *instance) error {
	s.mu.Lock()
	running := s.runCtx != nil && !s.stopping
	s.mu.Unlock()
	if !running {
		return errNotRunning
	}
	sctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	in.mu.Lock()
	in.started = true
	in.mu.Unlock()
	in.slotMu.Lock()
	in.withdrawn = false
	in.slotMu.Unlock()
	if err := in.managed.Start(sctx); err != nil {
		return err
	}
	in.setState(ctl.StateRunning, "")
	if err := s.supervise(in); err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ctl.DefaultStopGrace+5*time.Second)
		defer cancel()
		if serr := in.managed.Stop(stopCtx, ctl.DefaultStopGrace); serr != nil {
			return fmt.Errorf("%w (and stop: %v)", err, serr)
		}
		return err
	}
	return nil
}

// supervise starts a supervisor goroutine (owned by Run) for a started
// instance.
func (s *supervisors) supervise(in *instance) error {
	cfg := s.config()
	sup, err := runner.NewSupervisor(in.adapter, runner.SupervisorConfig{
		Policy:         cfg.RestartPolicy,
		HealthInterval: cfg.HealthInterval,
		// The adapter applies the verb's grace; this only bounds the wait.
		StopGrace: ctl.MaxStopGrace,
	}, runner.SupervisorDeps{
		Logger:   s.log.Named("supervisor").With(zap.String("instance", in.id)),
		Now:      s.now,
		OnChange: func(st runner.State, _ runner.Health) { s.onChange(in, st) },
	})
	if err != nil {
		return fmt.Errorf("supervise %s: %w", in.id, err)
	}
	s.mu.Lock()
	if s.runCtx == nil || s.stopping {
		s.mu.Unlock()
		return errNotRunning
	}
	ctx := s.runCtx
	s.wg.Add(1)
	s.mu.Unlock()
	done := make(chan struct{})
	in.adapter.grace.Store(0)
	in.adapter.adopt.Store(true)
	in.mu.Lock()
	in.sup, in.supDone = sup, done
	in.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer close(done)
		_ = sup.Run(ctx)
	}()
	return nil
}

// onChange follows a supervisor's state: the instance's registration of
// its role is held while running and released otherwise, and restarts and
// failures are chained.
func (s *supervisors) onChange(in *instance, st runner.State) {
	in.mu.Lock()
	sup := in.sup
	in.mu.Unlock()
	restarts, reason := 0, ""
	var cause error
	if sup != nil {
		_, restarts, reason = sup.State()
		cause = sup.Cause()
	}
	now := s.now()
	switch st {
	case runner.StateStarting:
		return
	case runner.StateRunning:
		in.mu.Lock()
		in.enterLocked(ctl.StateRunning, "", "", now)
		in.restarts = restarts
		in.mu.Unlock()
		s.roles.register(in)
		return
	}
	s.roles.deregister(in)
	code := stateReason(cause)
	in.mu.Lock()
	in.restarts = restarts
	switch st {
	case runner.StateUnhealthy:
		in.enterLocked(ctl.StateUnhealthy, code, reason, now)
	case runner.StateRestarting:
		in.enterLocked(ctl.StateRestarting, code, reason, now)
	case runner.StateFailed:
		if code != ctl.ReasonNotLoopback {
			code = ctl.ReasonRestartBudget // the supervisor fails for no other cause
		}
		in.enterLocked(ctl.StateFailed, code, reason, now)
	case runner.StateStopped:
		// A verb or shutdown stopped it; the verb sets its own state.
		if in.state != ctl.StateFailed {
			in.enterLocked(ctl.StateStopped, "", reason, now)
		}
	}
	in.mu.Unlock()
	switch st {
	case runner.StateRestarting:
		s.met.restarts.Inc()
		_ = s.jnl.record(KindRestart, map[string]any{"instance_id": in.id, "decision_id": in.decision,
			"package": in.pkgID, "version": in.version, "restarts": restarts, "reason": reason})
	case runner.StateFailed:
		s.met.failures.WithLabelValues(code).Inc()
		_ = s.jnl.record(KindFailed, map[string]any{"instance_id": in.id, "decision_id": in.decision,
			"package": in.pkgID, "version": in.version, "restarts": restarts, "reason": reason, "code": code})
	}
}

// stopRun stops a running instance: its registration of its role is
// withdrawn first (new requests go elsewhere at once), then, for up to
// drainGrace, the requests already resolved to it are let finish, and only
// then is the process stopped with grace: through its supervisor when it
// has one, else directly. The caller holds in.opMu.
func (s *supervisors) stopRun(ctx context.Context, in *instance, grace, drainGrace time.Duration) error {
	if s.stopFault != nil {
		if err := s.stopFault(in.id); err != nil {
			return err
		}
	}
	s.roles.drain(ctx, in, s.roles.withdraw(in), drainGrace)
	if !in.stopSupervisor(grace) {
		sctx, cancel := context.WithTimeout(ctx, grace+5*time.Second)
		defer cancel()
		if err := in.managed.Stop(sctx, grace); err != nil {
			return err
		}
	}
	if in.managed.Alive() {
		return errors.New("process still alive after stop")
	}
	return nil
}
