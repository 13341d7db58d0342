package lifecycle

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/reload"
)

// Appender is the audit chain as the reloader writes to it.
type Appender interface {
	Append(source, kind string, payload any) (chain.Entry, error)
}

var _ Appender = (*chain.Chain)(nil)

// ReloaderConfig is what a Reloader applies a config with.
type ReloaderConfig struct {
	// Source names the config (its file) in logs and chain entries.
	Source string
	// Load reads and validates the whole config again.
	Load func() (*config.Config, error)
	// Current is the config in force.
	Current func() *config.Config
	// Check runs the checks a start runs on next (the components' static
	// checks, the node references); nil checks nothing more.
	Check func(next *config.Config) error
	// Steps are the reloadable components' parts of next, in commit
	// order (one internal/reload list).
	Steps func(next *config.Config) []reload.Step
	Chain Appender
	Log   *zap.Logger
	// Registerer takes nodeld_config_last_reload_successful and
	// nodeld_config_reloads_total.
	Registerer prometheus.Registerer
}

// Reloader applies a config reload all or nothing and reports it.
type Reloader struct {
	c     ReloaderConfig
	ok    prometheus.Gauge
	total *prometheus.CounterVec

	mu      sync.Mutex
	lastErr string // guarded by mu; "" after a reload that went through
}

// NewReloader registers the reload metrics (the start's config counts as
// a successful load) and returns the reloader.
func NewReloader(c ReloaderConfig) (*Reloader, error) {
	r := &Reloader{c: c,
		ok: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_config_last_reload_successful",
			Help: "Whether the last config load or reload succeeded (1) or was refused (0).",
		}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_config_reloads_total",
			Help: "Config reloads by result (ok, refused).",
		}, []string{"result"}),
	}
	if err := RegisterAll(c.Registerer, r.ok, r.total); err != nil {
		return nil, err
	}
	r.ok.Set(1)
	return r, nil
}

// RegisterAll registers cs on reg, or reports the first that fails.
func RegisterAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

// LastError is why the last reload was refused, "" when it went through
// (or none was tried).
func (r *Reloader) LastError() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// Reload applies the config again (apply) and reports the outcome: the
// gauge and counter, LastError, a log line and, for a refusal, a chain
// entry (a reload that went through chained its own before it took
// effect). It returns the refusal.
func (r *Reloader) Reload() error {
	err := r.apply()
	result, msg := "ok", ""
	if err != nil {
		result, msg = "refused", err.Error()
	}
	r.mu.Lock()
	r.lastErr = msg
	r.mu.Unlock()
	r.total.WithLabelValues(result).Inc()
	if err == nil {
		r.ok.Set(1)
		r.c.Log.Info("config reloaded", zap.String("config", r.c.Source))
		return nil
	}
	r.ok.Set(0)
	r.c.Log.Error("config reload refused; keeping the old config", zap.Error(err))
	if _, cerr := r.c.Chain.Append(ChainSource, "config.reload", map[string]any{
		"ok": false, "config": r.c.Source, "error": msg,
	}); cerr != nil {
		r.c.Log.Error("chain config.reload", zap.Error(cerr))
	}
	return err
}

// apply applies the config all or nothing:
//
//  1. read, decode and validate the whole file (Load);
//  2. refuse a change to a key that takes effect only on restart
//     (config.RestartOnly, the one list);
//  3. run the checks a start runs (Check);
//  4. prepare every component (Steps, reload.All): these change nothing,
//     except what a step holds until its commit or abort (the proxy's new
//     role ports, so that a port in use fails here);
//  5. chain the reload; if that fails, abort;
//  6. commit every component, in the list's order; no commit can fail.
//
// On any error the old config stays fully in force and the error says why.
func (r *Reloader) apply() error {
	next, err := r.c.Load()
	if err != nil {
		return err
	}
	diff := config.Changed(r.c.Current(), next)
	if err := diff.RestartError(); err != nil {
		return err
	}
	if r.c.Check != nil {
		if err := r.c.Check(next); err != nil {
			return err
		}
	}
	p, err := reload.All(r.c.Steps(next))
	if err != nil {
		return err
	}
	if _, err := r.c.Chain.Append(ChainSource, "config.reload", map[string]any{
		"ok": true, "config": r.c.Source, "changed": diff.Fields,
	}); err != nil {
		p.Abort()
		return fmt.Errorf("chain config.reload: %w", err)
	}
	p.Commit()
	return nil
}
