package host

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/runner"
)

// lifecycle serves the mutating verbs of workload.ctl: place and load
// (place.go), start, stop and unload. It admits, fetches through the
// store, isolates, lists in the registry and hands processes to the
// supervisors; each instance's opMu serialises the verbs on it.
type lifecycle struct {
	self   *identity.Identity
	rev    *pkg.Revocations
	facts  *facts.Source
	config func() Config
	reg    *registry
	store  *store
	iso    *isolation
	sup    *supervisors
	jnl    *journal
	met    *metrics
	log    *zap.Logger
	now    func() time.Time

	// mu guards ollamaURL.
	mu sync.Mutex
	// ollamaURL is the Ollama daemon the ollama packages drive, "" for
	// runner.DefaultOllamaURL; tests set it to a fake daemon.
	ollamaURL string
}

// lockListed finds the instance id names and takes its operation lock,
// refusing if there is none or if it was unloaded while the lock was
// waited for. unlock releases the lock.
func (l *lifecycle) lockListed(id string) (in *instance, unlock func(), r *ctl.Refusal) {
	in, r = l.reg.lookup(id)
	if r != nil {
		return nil, nil, r
	}
	in.opMu.Lock()
	if !l.reg.listed(in) {
		in.opMu.Unlock()
		return nil, nil, ctl.NewRefusal(ctl.CodeUnknownInstance, "instance "+in.id+" was unloaded")
	}
	return in, in.opMu.Unlock, nil
}

// opRecord is what every verb's chain record says: the request's
// decision and requester, and the instance with its package and version.
func opRecord(req ctl.Request, in *instance) map[string]any {
	rec := map[string]any{"decision_id": req.DecisionID, "requester": req.Requester,
		"instance_id": in.id, "package": in.pkgID, "version": in.version}
	if req.Term != 0 {
		rec["term"] = req.Term
	}
	return rec
}

// start starts a loaded, stopped or failed instance with a fresh restart
// budget: host.start.begin is chained first, and host.start once it runs.
func (l *lifecycle) start(ctx context.Context, req ctl.Request, p ctl.InstanceParams) (any, *ctl.Refusal) {
	in, unlock, r := l.lockListed(p.InstanceID)
	if r != nil {
		return nil, r
	}
	defer unlock()
	if err := l.rev.CheckVerified(in.verified); err != nil {
		return nil, revocationRefusal("", err)
	}
	switch in.snapshot().state {
	case ctl.StateRunning, ctl.StateUnhealthy, ctl.StateRestarting:
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "instance "+in.id+" is already running")
	}
	// A start is taken only once its begin record is written (fail
	// closed); stop and unload reduce risk and proceed without theirs.
	if err := l.jnl.record(KindStartBegin, opRecord(req, in)); err != nil {
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "audit chain unavailable")
	}
	// A failed instance may still have a supervisor that ended; clear it.
	in.stopSupervisor(ctl.DefaultStopGrace)
	if err := l.sup.startRun(ctx, in); err != nil {
		// Failed, not stopped: stopped is an operator's intent, failed
		// asks for a start again (a controller's, once the cause is gone).
		reason := ctl.ReasonStartFailed
		if errors.Is(err, runner.ErrNotLoopback) {
			reason = ctl.ReasonNotLoopback
		}
		in.enter(ctl.StateFailed, reason, "start failed: "+err.Error())
		l.met.failures.WithLabelValues(reason).Inc()
		l.log.Warn("instance start failed", zap.String("instance", in.id), zap.String("reason", reason), zap.Error(err))
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "start failed: "+err.Error())
	}
	_ = l.jnl.record(KindStart, opRecord(req, in))
	return ctl.StartResult{Started: in.id}, nil
}

// stop stops an instance with the request's grace: its role is withdrawn
// first, the requests in flight to it get up to that grace to finish, and
// the process then gets the grace to exit.
func (l *lifecycle) stop(ctx context.Context, req ctl.Request, p ctl.InstanceParams) (any, *ctl.Refusal) {
	in, unlock, r := l.lockListed(p.InstanceID)
	if r != nil {
		return nil, r
	}
	defer unlock()
	if err := l.sup.stopRun(ctx, in, p.Grace(), p.Grace()); err != nil {
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "stop failed: "+err.Error())
	}
	in.setState(ctl.StateStopped, "stopped by "+req.Requester)
	res := ctl.StopResult{Stopped: in.id}
	ev := map[string]any{}
	if ex, ok := in.lastExit(); ok {
		ev = map[string]any{"exit_code": ex.Code, "signal": int(ex.Signal), "killed": ex.Killed, "stopped": ex.Stopped}
		res.Evidence, _ = json.Marshal(ev)
	}
	rec := opRecord(req, in)
	rec["grace_ms"], rec["evidence"] = p.Grace().Milliseconds(), ev
	_ = l.jnl.record(KindStop, rec)
	return res, nil
}

// unload stops an instance if it runs, as stop does with the default
// grace, and removes it, remembering it as
// departed, and removes its package directory unless another instance or
// a place in flight uses it.
func (l *lifecycle) unload(ctx context.Context, req ctl.Request, p ctl.InstanceParams) (any, *ctl.Refusal) {
	in, unlock, r := l.lockListed(p.InstanceID)
	if r != nil {
		return nil, r
	}
	defer unlock()
	if err := l.sup.stopRun(ctx, in, ctl.DefaultStopGrace, ctl.DefaultStopGrace); err != nil {
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "unload failed: "+err.Error())
	}
	l.reg.remove(in, ctl.DepartedUnloaded)
	l.iso.release(in)
	_ = l.jnl.record(KindUnload, opRecord(req, in))
	l.store.release(in.pkgDir())
	return ctl.UnloadResult{Unloaded: in.id}, nil
}
