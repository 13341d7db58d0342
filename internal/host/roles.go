package host

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/table"
)

// roles holds the placed inference instances' registrations of their
// roles in the table: registered while an instance's supervisor reports
// it running, released otherwise, and withdrawn ahead of a stop, whose
// requests in flight it then lets drain. Each instance's slotMu guards
// its own registration; roles has no state of its own and no lock.
type roles struct {
	// table receives the registrations; nil registers nothing.
	table Table
	met   *metrics
	log   *zap.Logger
}

// register registers in's role as served by in, through in's own
// registration: another instance of the role keeps its own, and the table
// elects which one serves.
func (r *roles) register(in *instance) {
	if r.table == nil || !in.inference {
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
		in.slot, err = r.table.RegisterLocal(table.OriginPlaced, in.role, ep, in.model, runner.APIOpenAI, string(in.kind))
	}
	if err != nil {
		r.log.Warn("register role", zap.String("role", in.role), zap.String("instance", in.id), zap.Error(err))
	}
}

// deregister releases in's registration of its role, and only it: the
// role stays served by any other instance registered for it.
func (r *roles) deregister(in *instance) {
	in.slotMu.Lock()
	defer in.slotMu.Unlock()
	in.keepActivityLocked()
	in.slot.Release()
	in.slot = nil
}

// withdraw releases in's registration ahead of a stop, so new requests
// for its role go to another registration (an adopted server or another
// placed instance standing by) or a peer from now on, and keeps the
// supervisor from registering it again until the next start. It returns
// the released registration (nil when there was none), whose Drained says
// when the requests already resolved to the instance are answered.
func (r *roles) withdraw(in *instance) *table.LocalSlot {
	in.slotMu.Lock()
	defer in.slotMu.Unlock()
	in.withdrawn = true
	in.keepActivityLocked()
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
func (r *roles) drain(ctx context.Context, in *instance, s *table.LocalSlot, grace time.Duration) {
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
	r.met.drainsCut.Inc()
	r.log.Warn("stopping an instance with requests still in flight", zap.String("instance", in.id),
		zap.String("role", in.role), zap.Int("in_flight", s.Holds()), zap.Duration("grace", grace))
}
