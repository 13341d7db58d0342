package plane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/reload"
)

// update is a config and targets handed to the controller's loop.
type update struct {
	cfg     Config
	targets []Target
}

// Prepare checks a reload's config and targets (Validate, and the target
// list's checks) and changes nothing; the returned change hands them to
// the loop (Reconfigure) and cannot fail.
func (c *Controller) Prepare(cfg Config, ts []Target) (reload.Prepared, error) {
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("controller: %w", err))
	}
	if err := checkTargets(ts); err != nil {
		errs = append(errs, fmt.Errorf("controller targets: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	ts = slices.Clone(ts)
	return reload.Commit(func() { c.Reconfigure(cfg, ts) }), nil
}

// Reconfigure hands the controller a config and targets to put in force
// (a reload, or targets resolved again once a peer's key is pinned). Run
// applies them at once between two ticks, and takes a changed Tick as its
// new period; without Run, the next Tick applies them first. A later call
// replaces one not applied yet. What its checks refuse is logged and
// dropped, keeping what is in force (Prepare checks beforehand).
func (c *Controller) Reconfigure(cfg Config, ts []Target) {
	c.pendingMu.Lock()
	c.pending = &update{cfg: cfg, targets: slices.Clone(ts)}
	c.pendingMu.Unlock()
	c.wakeRun()
}

// wakeRun tells Run that a config or targets are due.
func (c *Controller) wakeRun() {
	select {
	case c.due <- struct{}{}:
	default:
	}
}

// applyPending puts in force what Reconfigure handed over, if anything.
// The caller holds tickMu.
func (c *Controller) applyPending() {
	c.pendingMu.Lock()
	u := c.pending
	c.pending = nil
	c.pendingMu.Unlock()
	if u == nil {
		return
	}
	if err := u.cfg.Validate(); err != nil {
		c.log.Error("controller config not applied", zap.Error(err))
	} else {
		c.cfg.Store(&u.cfg)
	}
	if err := c.replaceTargets(u.targets); err != nil {
		c.log.Error("controller targets not applied", zap.Error(err))
		return
	}
	c.log.Debug("controller targets applied", zap.Int("targets", len(u.targets)))
}

// Run runs the lifecycle tick every Config.Tick until ctx ends, then
// returns nil. It owns re-applying the controller's config and targets:
// what Reconfigure hands over (a reload, Refresh) is applied as soon as no
// tick runs, and a changed Tick restarts the ticker with the new period.
// Tick errors are reported through the chain and metrics only. With
// Deps.ManualTicks it only waits for ctx (the test ticks).
func (c *Controller) Run(ctx context.Context) error {
	if c.manual {
		// The test ticks itself.
		<-ctx.Done()
		return nil
	}
	period := c.conf().Tick
	t := time.NewTicker(period)
	defer t.Stop()
	var changed <-chan struct{}
	if c.lead.src != nil {
		changed = c.lead.src.Changed()
		c.followLead(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			c.followLead(ctx)
		case <-c.due:
			c.life.tickMu.Lock()
			c.applyPending()
			c.life.tickMu.Unlock()
			if p := c.conf().Tick; p != period {
				period = p
				t.Reset(p)
				c.log.Info("lifecycle tick changed", zap.Duration("tick", p))
			}
		case <-t.C:
			if err := c.Tick(ctx); err != nil {
				c.log.Warn("lifecycle tick", zap.Error(err))
			}
		case <-c.tickNow:
			// A demand: place it now.
			if err := c.Tick(ctx); err != nil {
				c.log.Warn("lifecycle tick", zap.Error(err))
			}
		}
	}
}
