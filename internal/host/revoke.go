package host

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

// sweepRevocations tears down every instance that carries a revoked
// subject: its role is withdrawn, then its supervisor and process are
// stopped at once (2 s grace for the process, no wait for the requests in
// flight to it and no other check: the revocation is the authority), and it
// leaves the list as departed (revoked), chained host.revoked.teardown. A
// teardown that fails keeps the instance listed and is retried by the
// next sweep; it reports whether every teardown succeeded. Idempotent.
func (h *Host) sweepRevocations(ctx context.Context) bool {
	h.mu.Lock()
	insts := h.sortedInstancesLocked()
	h.mu.Unlock()
	ok := true
	for _, in := range insts {
		err := h.rev.CheckVerified(in.verified)
		if err == nil {
			continue
		}
		subject := ""
		if ve, isVE := errors.AsType[*pkg.VerifyError](err); isVE && ve.Subject != nil {
			subject = ve.Subject.String()
		}
		if !h.teardown(ctx, in, subject) {
			ok = false
		}
	}
	return ok
}

func (h *Host) teardown(ctx context.Context, in *instance, subject string) bool {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	if !h.listed(in) {
		return true
	}
	payload := map[string]any{"instance_id": in.id, "decision_id": in.decision, "package": in.pkgID,
		"version": in.version, "subject": subject}
	if err := h.stopRun(context.WithoutCancel(ctx), in, shutdownGrace, 0); err != nil {
		payload["unloaded"] = false
		payload["error"] = err.Error()
		_ = h.record(KindRevokedTeardown, payload)
		h.log.Warn("revocation teardown", zap.String("instance", in.id), zap.Error(err))
		return false
	}
	h.remove(in, ctl.DepartedRevoked)
	h.releaseIsolation(in)
	h.met.teardowns.Inc()
	payload["unloaded"] = true
	_ = h.record(KindRevokedTeardown, payload)
	h.releasePackage(in.pkgDir())
	return true
}
