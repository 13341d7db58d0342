package host

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

// revoker enforces the revocation list on the listed instances: its
// watcher (Run's) sweeps them on every change of the list, every
// RevocationSweep, and TeardownRetry after a failed teardown, and tears
// down each that carries a revoked subject. Its state is the registry's
// and the instances'; it has no lock of its own.
type revoker struct {
	rev   *pkg.Revocations
	reg   *registry
	sup   *supervisors
	iso   *isolation
	store *store
	jnl   *journal
	met   *metrics
	log   *zap.Logger
}

// watch sweeps until ctx ends: at once, on every change of the list,
// every RevocationSweep, and TeardownRetry after a sweep whose teardowns
// did not all succeed.
func (r *revoker) watch(ctx context.Context) {
	changes, cancel := r.rev.Subscribe()
	defer cancel()
	r.sweep(ctx)
	sweep := time.NewTicker(RevocationSweep)
	defer sweep.Stop()
	var retry <-chan time.Time
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-changes:
		case <-sweep.C:
		case <-retry:
		}
		if ctx.Err() != nil {
			break
		}
		retry = nil
		if !r.sweep(ctx) {
			retry = time.After(TeardownRetry)
		}
	}
}

// sweep tears down every instance that carries a revoked
// subject: its role is withdrawn, then its supervisor and process are
// stopped at once (2 s grace for the process, no wait for the requests in
// flight to it and no other check: the revocation is the authority), and it
// leaves the list as departed (revoked), chained host.revoked.teardown. A
// teardown that fails keeps the instance listed and is retried by the
// next sweep; it reports whether every teardown succeeded. Idempotent.
func (r *revoker) sweep(ctx context.Context) bool {
	insts := r.reg.sorted()
	ok := true
	for _, in := range insts {
		err := r.rev.CheckVerified(in.verified)
		if err == nil {
			continue
		}
		subject := ""
		if ve, isVE := errors.AsType[*pkg.VerifyError](err); isVE && ve.Subject != nil {
			subject = ve.Subject.String()
		}
		if !r.teardown(ctx, in, subject) {
			ok = false
		}
	}
	return ok
}

func (r *revoker) teardown(ctx context.Context, in *instance, subject string) bool {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	if !r.reg.listed(in) {
		return true
	}
	payload := map[string]any{"instance_id": in.id, "decision_id": in.decision, "package": in.pkgID,
		"version": in.version, "subject": subject}
	if err := r.sup.stopRun(context.WithoutCancel(ctx), in, shutdownGrace, 0); err != nil {
		payload["unloaded"] = false
		payload["error"] = err.Error()
		_ = r.jnl.record(KindRevokedTeardown, payload)
		r.log.Warn("revocation teardown", zap.String("instance", in.id), zap.Error(err))
		return false
	}
	r.reg.remove(in, ctl.DepartedRevoked)
	r.iso.release(in)
	r.met.teardowns.Inc()
	payload["unloaded"] = true
	_ = r.jnl.record(KindRevokedTeardown, payload)
	r.store.release(in.pkgDir())
	return true
}
