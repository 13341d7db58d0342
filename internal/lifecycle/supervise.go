package lifecycle

import (
	"context"
	"os"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// Condition is one readiness condition the supervisor waits for: Ready is
// closed once it holds (a listener bound).
type Condition struct {
	Name  string
	Ready <-chan struct{}
}

// Supervisor waits for readiness, tells systemd, pings its watchdog, and
// reloads on SIGHUP until its context ends (Run).
type Supervisor struct {
	// Conditions are waited for in order; each is reported to SetReady
	// as it holds.
	Conditions []Condition
	SetReady   func(name string, ok bool)
	// Draining is the condition reported not ready once the stop begins
	// (the proxy's, while it drains); "" reports none.
	Draining string
	// Alive reports whether the watchdog may be pinged: the listeners
	// are up, whatever else says (a chain that cannot be written makes
	// the node not ready, but a restart would not bring disk space back).
	Alive func() bool
	// Reload applies the config again; called on Run's goroutine.
	Reload func()
	// ReadyFields are logged with "ready" (the bound addresses).
	ReadyFields func() []zap.Field
	Log         *zap.Logger
	// Notify tells the service manager a state (daemon.SdNotifyReady,
	// ...); nil is systemd's sd_notify, a no-op outside systemd.
	Notify func(state string) error
	// Watchdog is the watchdog's interval (0: none); nil asks systemd.
	Watchdog func() time.Duration
}

// Run waits for every condition in order, says ready (the log and the
// service manager), then pings the watchdog every half interval while
// Alive and reloads on each hup, until ctx ends. It returns nil.
func (s *Supervisor) Run(ctx context.Context, hup <-chan os.Signal) error {
	notify := s.Notify
	if notify == nil {
		notify = func(state string) error { _, err := daemon.SdNotify(false, state); return err }
	}
	for _, c := range s.Conditions {
		select {
		case <-c.Ready:
			s.SetReady(c.Name, true)
		case <-ctx.Done():
			return nil
		}
	}
	var fields []zap.Field
	if s.ReadyFields != nil {
		fields = s.ReadyFields()
	}
	s.Log.Info("ready", fields...)
	if err := notify(daemon.SdNotifyReady); err != nil {
		s.Log.Warn("sd_notify ready", zap.Error(err))
	}
	var watchdog <-chan time.Time
	if interval := s.watchdogInterval(); interval > 0 {
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		watchdog = t.C
		s.Log.Info("systemd watchdog enabled", zap.Duration("interval", interval))
	}
	defer func() {
		if s.Draining != "" {
			s.SetReady(s.Draining, false)
		}
		_ = notify(daemon.SdNotifyStopping)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			_ = notify(daemon.SdNotifyReloading)
			s.Reload()
			_ = notify(daemon.SdNotifyReady)
		case <-watchdog:
			if s.Alive == nil || s.Alive() {
				_ = notify(daemon.SdNotifyWatchdog)
			}
		}
	}
}

func (s *Supervisor) watchdogInterval() time.Duration {
	if s.Watchdog != nil {
		return s.Watchdog()
	}
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0
	}
	return interval
}
