package host

import (
	"context"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/runner"
)

// lookup returns the instance named by p, or unknown_instance.
func (h *Host) lookup(id string) (*instance, *ctl.Refusal) {
	h.mu.Lock()
	in := h.insts[id]
	h.mu.Unlock()
	if in == nil {
		return nil, ctl.NewRefusal(ctl.CodeUnknownInstance, "no instance "+id+" on this node")
	}
	return in, nil
}

// listed reports whether in is still the listed instance of its id.
func (h *Host) listed(in *instance) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.insts[in.id] == in
}

// lockListed finds the instance id names and takes its operation lock,
// refusing if there is none or if it was unloaded while the lock was
// waited for. unlock releases the lock.
func (h *Host) lockListed(id string) (in *instance, unlock func(), r *ctl.Refusal) {
	in, r = h.lookup(id)
	if r != nil {
		return nil, nil, r
	}
	in.opMu.Lock()
	if !h.listed(in) {
		in.opMu.Unlock()
		return nil, nil, ctl.NewRefusal(ctl.CodeUnknownInstance, "instance "+in.id+" was unloaded")
	}
	return in, in.opMu.Unlock, nil
}

// opRecord is what every verb's chain record says: the request's
// decision and requester, and the instance with its package and version.
func opRecord(req ctl.Request, in *instance) map[string]any {
	return map[string]any{"decision_id": req.DecisionID, "requester": req.Requester,
		"instance_id": in.id, "package": in.pkgID, "version": in.version}
}

func (in *instance) ctlStatus() ctl.InstanceStatus {
	snap := in.snapshot()
	st := ctl.InstanceStatus{
		InstanceID: in.id, Package: in.pkgID, Variant: in.variant, DecisionID: in.decision,
		Status: snap.wireState(), Lifecycle: snap.state, Restarts: snap.restarts,
	}
	if ex, ok := in.lastExit(); ok {
		code := ex.Code
		st.Status.ExitCode = &code
	}
	return st
}

// status lists in-flight decisions first, then instances, then (when
// asked) departed instances; or one instance.
func (h *Host) status(p ctl.InstanceParams) (any, *ctl.Refusal) {
	if p.InstanceID != "" {
		in, r := h.lookup(p.InstanceID)
		if r != nil {
			return nil, r
		}
		return in.ctlStatus(), nil
	}
	h.mu.Lock()
	fl := h.inflightLocked()
	insts := h.sortedInstancesLocked()
	var departed []ctl.Departed
	if p.IncludeDeparted {
		departed = append([]ctl.Departed{}, h.departed...)
	}
	h.mu.Unlock()
	out := ctl.StatusList{InFlight: make([]string, 0, len(fl)), Instances: make([]ctl.InstanceStatus, 0, len(insts)), Departed: departed}
	for _, f := range fl {
		out.InFlight = append(out.InFlight, f.DecisionID)
	}
	for _, in := range insts {
		out.Instances = append(out.Instances, in.ctlStatus())
	}
	return out, nil
}

// logs returns the last run's output, each stream capped at MaxLogBytes
// (the newest bytes, cut on a UTF-8 boundary).
func (h *Host) logs(p ctl.InstanceParams) (any, *ctl.Refusal) {
	in, r := h.lookup(p.InstanceID)
	if r != nil {
		return nil, r
	}
	if !in.snapshot().started {
		return ctl.LogsResult{InstanceID: in.id, Note: "no run yet"}, nil
	}
	stdout, stderr := in.managed.Logs()
	res := ctl.LogsResult{InstanceID: in.id}
	var cut1, cut2 bool
	res.Stdout, cut1 = tailUTF8(stdout, MaxLogBytes)
	res.Stderr, cut2 = tailUTF8(stderr, MaxLogBytes)
	res.Truncated = cut1 || cut2
	if ex, ok := in.lastExit(); ok {
		code := ex.Code
		res.ExitCode = &code
	}
	return res, nil
}

// tailUTF8 keeps the last n bytes of b, starting on a rune boundary, as a
// valid UTF-8 string.
func tailUTF8(b []byte, n int) (string, bool) {
	cut := false
	if len(b) > n {
		b = b[len(b)-n:]
		cut = true
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return string(b), cut
}

// start starts a loaded, stopped or failed instance with a fresh restart
// budget: host.start.begin is chained first, and host.start once it runs.
func (h *Host) start(ctx context.Context, req ctl.Request, p ctl.InstanceParams) (any, *ctl.Refusal) {
	in, unlock, r := h.lockListed(p.InstanceID)
	if r != nil {
		return nil, r
	}
	defer unlock()
	if err := h.rev.CheckVerified(in.verified); err != nil {
		return nil, revocationRefusal("", err)
	}
	switch in.snapshot().state {
	case ctl.StateRunning, ctl.StateUnhealthy, ctl.StateRestarting:
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "instance "+in.id+" is already running")
	}
	// A start is taken only once its begin record is written (fail
	// closed); stop and unload reduce risk and proceed without theirs.
	if err := h.record(KindStartBegin, opRecord(req, in)); err != nil {
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "audit chain unavailable")
	}
	// A failed instance may still have a supervisor that ended; clear it.
	in.stopSupervisor(ctl.DefaultStopGrace)
	if err := h.startRun(ctx, in); err != nil {
		// Failed, not stopped: stopped is an operator's intent, failed
		// asks for a start again (a controller's, once the cause is gone).
		reason := ctl.ReasonStartFailed
		if errors.Is(err, runner.ErrNotLoopback) {
			reason = ctl.ReasonNotLoopback
		}
		in.enter(ctl.StateFailed, reason, "start failed: "+err.Error())
		h.met.failures.WithLabelValues(reason).Inc()
		h.log.Warn("instance start failed", zap.String("instance", in.id), zap.String("reason", reason), zap.Error(err))
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "start failed: "+err.Error())
	}
	_ = h.record(KindStart, opRecord(req, in))
	return ctl.StartResult{Started: in.id}, nil
}

// stop stops an instance with the request's grace: its role is withdrawn
// first, the requests in flight to it get up to that grace to finish, and
// the process then gets the grace to exit.
func (h *Host) stop(ctx context.Context, req ctl.Request, p ctl.InstanceParams) (any, *ctl.Refusal) {
	in, unlock, r := h.lockListed(p.InstanceID)
	if r != nil {
		return nil, r
	}
	defer unlock()
	if err := h.stopRun(ctx, in, p.Grace(), p.Grace()); err != nil {
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
	_ = h.record(KindStop, rec)
	return res, nil
}

// unload stops an instance if it runs, as stop does with the default
// grace, and removes it, remembering it as
// departed, and removes its package directory unless another instance or
// a place in flight uses it.
func (h *Host) unload(ctx context.Context, req ctl.Request, p ctl.InstanceParams) (any, *ctl.Refusal) {
	in, unlock, r := h.lockListed(p.InstanceID)
	if r != nil {
		return nil, r
	}
	defer unlock()
	if err := h.stopRun(ctx, in, ctl.DefaultStopGrace, ctl.DefaultStopGrace); err != nil {
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "unload failed: "+err.Error())
	}
	h.remove(in, ctl.DepartedUnloaded)
	h.releaseIsolation(in)
	_ = h.record(KindUnload, opRecord(req, in))
	h.releasePackage(in.pkgDir())
	return ctl.UnloadResult{Unloaded: in.id}, nil
}

// remove drops a stopped instance and remembers it as departed.
func (h *Host) remove(in *instance, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.insts[in.id] != in {
		return
	}
	delete(h.insts, in.id)
	h.departed = append(h.departed, ctl.Departed{InstanceID: in.id, Reason: reason})
	if len(h.departed) > MaxDeparted {
		h.departed = append(h.departed[:0:0], h.departed[len(h.departed)-MaxDeparted:]...)
	}
}
