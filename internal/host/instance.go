package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/sandbox"
	"github.com/nodeld/nodeld/internal/table"
)

// errNotRunning: Run has not started or is ending, so nothing can be
// supervised.
var errNotRunning = errors.New("host is not running")

// instance is one loaded package on this node.
type instance struct {
	h                                                *Host
	id, decision, requester, pkgID, version, variant string
	role, model, manifestHash                        string
	kind                                             runner.Kind
	inference                                        bool
	verified                                         *pkg.Verified
	managed                                          *runner.Managed
	adapter                                          *supervised
	// sbx is the instance's isolation (nil: none), released when it goes.
	sbx *sandbox.Instance

	// opMu serialises the verbs and the forced teardown of this instance,
	// so Start and Stop of its process never race. It is held across
	// process starts and stops, never while taking h.mu for long.
	opMu sync.Mutex

	// mu guards the fields below.
	mu       sync.Mutex
	state    string
	detail   string
	reason   string    // a ctl.Reason* code, or ""
	since    time.Time // when state was entered
	restarts int
	started  bool // a run was ever started, so Wait answers at once after a stop
	sup      *runner.Supervisor
	supDone  chan struct{}

	// slotMu guards slot and withdrawn. It is held across the table's
	// RegisterLocal, Update and Release, which never block or call back
	// into the host, so a registration and a release of one instance never
	// interleave.
	slotMu sync.Mutex
	// slot is this instance's registration of its role, held while its
	// supervisor reports it running; nil otherwise.
	slot *table.LocalSlot
	// withdrawn is set when a stop withdrew the registration ahead of
	// the process (withdrawRole): the supervisor's reports do not
	// register it again until the next start (startRun).
	withdrawn bool
}

type instanceSnapshot struct {
	state, detail, reason string
	since                 time.Time
	restarts              int
	started               bool
}

func (in *instance) snapshot() instanceSnapshot {
	in.mu.Lock()
	defer in.mu.Unlock()
	return instanceSnapshot{state: in.state, detail: in.detail, reason: in.reason, since: in.since,
		restarts: in.restarts, started: in.started}
}

// wireState is the instance's state as workload.ctl reports it.
func (s instanceSnapshot) wireState() ctl.InstanceState {
	return ctl.InstanceState{State: s.state, Detail: s.detail, Since: s.since, Reason: s.reason}
}

func (in *instance) setState(state, detail string) { in.enter(state, "", detail) }

// enter sets the instance's state, its reason (a ctl.Reason* code, or "")
// and detail; since moves only when the state changes.
func (in *instance) enter(state, reason, detail string) {
	now := in.h.now()
	in.mu.Lock()
	in.enterLocked(state, reason, detail, now)
	in.mu.Unlock()
}

// enterLocked is enter with in.mu held.
func (in *instance) enterLocked(state, reason, detail string, now time.Time) {
	if state != in.state || in.since.IsZero() {
		in.since = now
	}
	in.state, in.reason, in.detail = state, reason, detail
}

// stateReason maps why a supervisor left running (runner.Supervisor.Cause)
// to the ctl reason code reported for it.
func stateReason(cause error) string {
	switch {
	case cause == nil:
		return ""
	case errors.Is(cause, runner.ErrNotLoopback):
		return ctl.ReasonNotLoopback
	case errors.Is(cause, runner.ErrRestartBudget):
		return ctl.ReasonRestartBudget
	case errors.Is(cause, runner.ErrStartFailed):
		return ctl.ReasonStartFailed
	case errors.Is(cause, runner.ErrExited):
		return ctl.ReasonExited
	default:
		return ctl.ReasonHealth
	}
}

// supervised adapts a Managed to the Supervisor: the host makes the first
// start of a run itself (so a failed start is refused and rolled back),
// and the Supervisor then adopts the running process instead of starting
// it again; stops use the grace of the verb that asked for them.
type supervised struct {
	m     *runner.Managed
	adopt atomic.Bool
	grace atomic.Int64 // time.Duration; 0 means ctl.DefaultStopGrace
}

func (s *supervised) Start(ctx context.Context) error {
	if s.adopt.Swap(false) && s.m.Alive() {
		return nil
	}
	return s.m.Start(ctx)
}

func (s *supervised) Stop(ctx context.Context, _ time.Duration) error {
	g := time.Duration(s.grace.Load())
	if g <= 0 {
		g = ctl.DefaultStopGrace
	}
	return s.m.Stop(ctx, g)
}

func (s *supervised) Health(ctx context.Context) (runner.Health, error) { return s.m.Health(ctx) }
func (s *supervised) Wait() <-chan runner.ExitStatus                    { return s.m.Wait() }

var _ runner.Instance = (*supervised)(nil)

// startRun starts the instance's process and hands it to a supervisor.
// The caller holds in.opMu.
func (h *Host) startRun(ctx context.Context, in *instance) error {
	h.mu.Lock()
	running := h.runCtx != nil && !h.stopping
	h.mu.Unlock()
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
	if err := h.supervise(in); err != nil {
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
func (h *Host) supervise(in *instance) error {
	cfg := h.config()
	sup, err := runner.NewSupervisor(in.adapter, runner.SupervisorConfig{
		Policy:         cfg.RestartPolicy,
		HealthInterval: cfg.HealthInterval,
		// The adapter applies the verb's grace; this only bounds the wait.
		StopGrace: ctl.MaxStopGrace,
	}, runner.SupervisorDeps{
		Logger:   h.log.Named("supervisor").With(zap.String("instance", in.id)),
		Now:      h.now,
		OnChange: func(st runner.State, _ runner.Health) { h.onChange(in, st) },
	})
	if err != nil {
		return fmt.Errorf("supervise %s: %w", in.id, err)
	}
	h.mu.Lock()
	if h.runCtx == nil || h.stopping {
		h.mu.Unlock()
		return errNotRunning
	}
	ctx := h.runCtx
	h.wg.Add(1)
	h.mu.Unlock()
	done := make(chan struct{})
	in.adapter.grace.Store(0)
	in.adapter.adopt.Store(true)
	in.mu.Lock()
	in.sup, in.supDone = sup, done
	in.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer close(done)
		_ = sup.Run(ctx)
	}()
	return nil
}

// stopSupervisor ends the instance's supervisor, which stops the process
// with grace, and waits for it. It returns false when none was running.
func (in *instance) stopSupervisor(grace time.Duration) bool {
	in.mu.Lock()
	sup, done := in.sup, in.supDone
	in.sup, in.supDone = nil, nil
	in.mu.Unlock()
	if sup == nil {
		return false
	}
	in.adapter.grace.Store(int64(grace))
	sup.Stop()
	<-done
	return true
}

// onChange follows a supervisor's state: the instance's registration of
// its role is held while running and released otherwise, and restarts and
// failures are chained.
func (h *Host) onChange(in *instance, st runner.State) {
	in.mu.Lock()
	sup := in.sup
	in.mu.Unlock()
	restarts, reason := 0, ""
	var cause error
	if sup != nil {
		_, restarts, reason = sup.State()
		cause = sup.Cause()
	}
	now := h.now()
	switch st {
	case runner.StateStarting:
		return
	case runner.StateRunning:
		in.mu.Lock()
		in.enterLocked(ctl.StateRunning, "", "", now)
		in.restarts = restarts
		in.mu.Unlock()
		h.registerRole(in)
		return
	}
	h.deregisterRole(in)
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
		h.met.restarts.Inc()
		_ = h.record(KindRestart, map[string]any{"instance_id": in.id, "decision_id": in.decision,
			"package": in.pkgID, "version": in.version, "restarts": restarts, "reason": reason})
	case runner.StateFailed:
		h.met.failures.WithLabelValues(code).Inc()
		_ = h.record(KindFailed, map[string]any{"instance_id": in.id, "decision_id": in.decision,
			"package": in.pkgID, "version": in.version, "restarts": restarts, "reason": reason, "code": code})
	}
}

// registerRole registers in's role as served by in, through in's own
// registration: another instance of the role keeps its own, and the table
// elects which one serves.
func (h *Host) registerRole(in *instance) {
	if h.table == nil || !in.inference {
		return
	}
	ep, alive := in.managed.Endpoint()
	if !alive || ep == "" {
		return
	}
	in.slotMu.Lock()
	defer in.slotMu.Unlock()
	if in.withdrawn {
		return
	}
	var err error
	if in.slot != nil {
		if err = in.slot.Update(ep, in.model, runner.APIOpenAI, string(in.kind)); err != nil {
			in.slot.Release()
			in.slot = nil
		}
	} else {
		in.slot, err = h.table.RegisterLocal(table.OriginPlaced, in.role, ep, in.model, runner.APIOpenAI, string(in.kind))
	}
	if err != nil {
		h.log.Warn("register role", zap.String("role", in.role), zap.String("instance", in.id), zap.Error(err))
	}
}

// deregisterRole releases in's registration of its role, and only it: the
// role stays served by any other instance registered for it.
func (h *Host) deregisterRole(in *instance) {
	in.slotMu.Lock()
	defer in.slotMu.Unlock()
	in.slot.Release()
	in.slot = nil
}

// withdrawRole releases in's registration ahead of a stop, so new requests
// for its role go to another registration (an adopted server or another
// placed instance standing by) or a peer from now on, and keeps the
// supervisor from registering it again until the next start. It returns
// the released registration (nil when there was none), whose Drained says
// when the requests already resolved to the instance are answered.
func (h *Host) withdrawRole(in *instance) *table.LocalSlot {
	in.slotMu.Lock()
	defer in.slotMu.Unlock()
	in.withdrawn = true
	s := in.slot
	in.slot = nil
	s.Release()
	return s
}

// drainingDetail is an instance's status detail while a stop waits for
// the requests in flight to it.
const drainingDetail = "stopping: waiting for requests in flight"

// drain waits until the requests resolved to s before its release are
// answered (table.LocalSlot.Drained), at most grace or until ctx ends;
// those still in flight then are cut by the stop that follows, which is
// logged and counted. A nil s, or no grace, waits for nothing.
func (h *Host) drain(ctx context.Context, in *instance, s *table.LocalSlot, grace time.Duration) {
	if s == nil || grace <= 0 {
		return
	}
	select {
	case <-s.Drained():
		return
	default:
	}
	in.mu.Lock()
	in.detail = drainingDetail
	in.mu.Unlock()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-s.Drained():
		return
	case <-t.C:
	case <-ctx.Done():
	}
	h.met.drainsCut.Inc()
	h.log.Warn("stopping an instance with requests still in flight", zap.String("instance", in.id),
		zap.String("role", in.role), zap.Int("in_flight", s.Holds()), zap.Duration("grace", grace))
}

// stopRun stops a running instance: its registration of its role is
// withdrawn first (new requests go elsewhere at once), then, for up to
// drainGrace, the requests already resolved to it are let finish, and only
// then is the process stopped with grace: through its supervisor when it
// has one, else directly. The caller holds in.opMu.
func (h *Host) stopRun(ctx context.Context, in *instance, grace, drainGrace time.Duration) error {
	if h.stopFault != nil {
		if err := h.stopFault(in.id); err != nil {
			return err
		}
	}
	h.drain(ctx, in, h.withdrawRole(in), drainGrace)
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

// lastExit returns how the last run ended, if one was started and ended.
func (in *instance) lastExit() (runner.ExitStatus, bool) {
	if !in.snapshot().started || in.managed.Alive() {
		return runner.ExitStatus{}, false
	}
	select {
	case st, ok := <-in.managed.Wait():
		return st, ok
	default:
		return runner.ExitStatus{}, false
	}
}
