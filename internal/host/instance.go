package host

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/sandbox"
	"github.com/nodeld/nodeld/internal/table"
)

// instance is one loaded package on this node.
type instance struct {
	id, decision, requester, pkgID, version, variant string
	role, model, manifestHash                        string
	kind                                             runner.Kind
	inference                                        bool
	verified                                         *pkg.Verified
	managed                                          *runner.Managed
	adapter                                          *supervised
	// sbx is the instance's isolation (nil: none), released when it goes.
	sbx *sandbox.Instance
	// now is the host's clock (Deps.Now), of since.
	now func() time.Time

	// opMu serialises the verbs and the forced teardown of this instance,
	// so Start and Stop of its process never race. It is held across
	// process starts and stops, never while taking registry.mu for long.
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

	// slotMu guards slot, withdrawn and the activity counts below. It is held across the table's
	// RegisterLocal, Update and Release, which never block or call back
	// into the host, so a registration and a release of one instance never
	// interleave.
	slotMu sync.Mutex
	// slot is this instance's registration of its role, held while its
	// supervisor reports it running; nil otherwise.
	slot *table.LocalSlot
	// withdrawn is set when a stop withdrew the registration ahead of
	// the process (roles.withdraw): the supervisor's reports do not
	// register it again until the next start (startRun).
	withdrawn bool
	// doneBefore counts the requests answered by its registrations
	// released so far (keepActivityLocked); doneSeen is the count of
	// answered requests activity last saw, and lastRequest when it saw it
	// move.
	doneBefore, doneSeen uint64
	lastRequest          time.Time
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
	now := in.now()
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
