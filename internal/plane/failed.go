package plane

// This file starts again the instances their hosts report failed: a
// supervisor's restart budget is a brake, not an end.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
	"go.uber.org/zap"
)

// Restart outcomes (nodeld_plane_instance_restarts_total).
const (
	outStarted = "started"
)

// restartFailed acts on a placed instance whose live node lists it (in)
// as the lifecycle step mirrored it: an instance of a declared workload,
// or of an operator's placement, that its host reports failed (its
// supervisor spent its restart budget) is started again through its
// node (a signed start, chained first), with the reschedule backoff
// (RetryBackoff doubling to MaxBackoff), and never given up. A start that
// fails leaves the instance stopped on its host: while FailedSince is set
// that counts as failed too. An instance its node no longer has is lost
// and placed again. A revoked package is retired instead; an instance
// the operator stopped, an upgrade's new instance (retired when it
// fails) and an adopted one (no order) are left alone. Once the instance
// has run past its backoff, FailedSince and the backoff are cleared.
func (c *lifecycle) restartFailed(ctx context.Context, pl *Placement, in ctl.InstanceStatus, now time.Time) error {
	c.mu.Lock()
	failing := !pl.FailedSince.IsZero()
	if live(in.Lifecycle) {
		recovered := failing && !now.Before(pl.NextAttempt)
		var rec lifecycleRecord
		if recovered {
			rec = lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: pl.InstanceID, Node: pl.Node, Workload: pl.Workload,
				From: ctl.StateFailed, To: in.Lifecycle, Attempt: pl.Attempts,
				Reason: fmt.Sprintf("running again after %d restarts by the controller (failed since %s)", pl.Attempts, pl.FailedSince.UTC().Format(time.RFC3339))}
			pl.FailedSince, pl.Attempts, pl.NextAttempt, pl.LastError = time.Time{}, 0, time.Time{}, ""
		}
		c.mu.Unlock()
		if !recovered {
			return nil
		}
		_, err := c.w.appendChain(KindLifecycle, rec)
		return err
	}
	failed := in.Lifecycle == ctl.StateFailed || (failing && in.Lifecycle == ctl.StateStopped && !pl.Stopped)
	if !failed || pl.Stopped || pl.Supersedes != "" || (pl.Declared == "" && pl.Order == nil) || now.Before(pl.NextAttempt) {
		c.mu.Unlock()
		return nil
	}
	demoted, why := c.ops.tierWaiverLocked(pl)
	node, iid, hash, pkgID := pl.Node, pl.InstanceID, pl.ManifestHash, pl.Package
	attempt := pl.Attempts + 1
	rec := lifecycleRecord{DecisionID: pl.DecisionID, InstanceID: iid, Node: node, Workload: pl.Workload,
		From: in.Lifecycle, To: ctl.StateRunning, Attempt: attempt,
		Reason: "starting again: its node reports the instance " + in.Lifecycle + " (its supervisor gave up)"}
	c.mu.Unlock()
	if demoted {
		_, err := c.w.alert(pl, "failed instance not started again: "+why)
		return err
	}
	if c.rev != nil {
		if err := c.rev.Check(&pkg.Manifest{ID: pkgID}, hash); err != nil {
			return c.w.retire(pl, "package revoked: "+err.Error(), err)
		}
	}
	// The request is chained before it is sent; a start that cannot be
	// chained is not sent.
	if _, err := c.w.appendChain(KindLifecycle, rec); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, c.conf().RescheduleTimeout)
	err := c.disp.Start(cctx, node, iid)
	cancel()
	c.mu.Lock()
	if pl.FailedSince.IsZero() {
		pl.FailedSince = now
	}
	pl.Attempts = attempt
	pl.NextAttempt = now.Add(backoff(c.conf().RetryBackoff, attempt))
	if err == nil {
		pl.HostState, pl.WasRunning = ctl.StateRunning, true
	}
	c.mu.Unlock()
	if err == nil {
		c.met.restarts.WithLabelValues(outStarted).Inc()
		c.log.Warn("failed instance started again", zap.String("workload", pl.Workload), zap.String("instance", iid),
			zap.String("node", node), zap.Int("attempt", attempt))
		return nil
	}
	c.met.restarts.WithLabelValues(outFailed).Inc()
	var ce *ctl.CallError
	if errors.As(err, &ce) && ce.Refusal != nil && ce.Refusal.Code == ctl.CodeUnknownInstance {
		// Gone from its node meanwhile: placed again.
		c.mu.Lock()
		pl.WasRunning, pl.FailedSince, pl.Attempts, pl.NextAttempt = true, time.Time{}, 0, time.Time{}
		c.mu.Unlock()
		if terr := c.w.transition(pl, LifeLost, "failed instance no longer on its node"); terr != nil {
			return terr
		}
		return c.reschedule(ctx, pl, false, now)
	}
	c.log.Warn("failed instance not started again", zap.String("workload", pl.Workload), zap.String("instance", iid),
		zap.String("node", node), zap.Int("attempt", attempt), zap.Error(err))
	_, aerr := c.w.alert(pl, fmt.Sprintf("failed instance not started again (attempt %d, retrying with backoff): %v", attempt, err))
	return aerr
}
