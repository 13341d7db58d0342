package host

import (
	"fmt"
	"os/exec"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/sandbox"
)

// KindOOMKilled is chained when the kernel killed an instance's process
// for exceeding the memory its manifest declares (its cgroup's limit).
// The supervisor then restarts it per its policy; the restart's reason
// ends in runner.ReasonOOMKilled.
const KindOOMKilled = "host.oom_killed"

// isolation is the host's side of internal/sandbox: it prepares the
// isolation of each placed instance of a process kind, launches its runs
// through it, reports the runs the kernel killed for their memory and
// releases it when the instance goes. Without an Isolator it isolates
// nothing. It has no mutable state of its own (the Isolator locks its
// own), so it needs no lock.
type isolation struct {
	// iso isolates placed instances (nil: none).
	iso *sandbox.Isolator
	// oomKills counts the runs the kernel killed for their memory.
	oomKills prometheus.Counter
	jnl      *journal
	log      *zap.Logger
}

func newIsolation(iso *sandbox.Isolator, jnl *journal, log *zap.Logger, reg prometheus.Registerer) (*isolation, error) {
	i := &isolation{
		iso: iso, jnl: jnl, log: log,
		oomKills: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_host_instance_oom_kills_total",
			Help: "Runs of placed instances the kernel killed for exceeding their declared memory (host.isolation.resources).",
		}),
	}
	if reg != nil {
		if err := reg.Register(i.oomKills); err != nil {
			return nil, fmt.Errorf("register host isolation metrics: %w", err)
		}
	}
	return i, nil
}

// limitsOf are the cgroup limits of a variant: its declared memory and
// CPU.
func limitsOf(v *pkg.Variant) sandbox.Limits {
	return sandbox.Limits{MemBytes: v.Resources.MemBytes, CPUMillis: v.Resources.CPUMillis}
}

// prepare prepares the isolation of a placed instance of a process kind
// (nil without an Isolator, and for ollama, whose daemon nodeld does not
// start), refusing one this node cannot isolate as its config requires.
func (i *isolation) prepare(id, dir string, kind runner.Kind, v *pkg.Variant) (*sandbox.Instance, *ctl.Refusal) {
	if i.iso == nil || kind == runner.KindOllama {
		return nil, nil
	}
	sbx, err := i.iso.Instance(id, dir, limitsOf(v))
	if err != nil {
		return nil, ctl.NewRefusal(ctl.CodeAdmission, err.Error())
	}
	return sbx, nil
}

// isoLauncher launches an instance's runs through its sandbox and
// reports those the kernel killed for their memory.
type isoLauncher struct {
	iso *isolation
	sbx *sandbox.Instance
	// id, decision and pkgID name the instance in records.
	id, decision, pkgID, version string
}

var _ runner.Launcher = (*isoLauncher)(nil)

func (l *isoLauncher) Wrap(cmd *exec.Cmd) (func(int) error, func() bool, error) {
	started, ended, err := l.sbx.Wrap(cmd)
	if err != nil {
		return nil, nil, err
	}
	return started, func() bool {
		oom := ended()
		if oom {
			l.iso.oomKilled(l)
		}
		return oom
	}, nil
}

// oomKilled counts, logs and chains an instance's run the kernel killed
// for its memory.
func (i *isolation) oomKilled(l *isoLauncher) {
	i.oomKills.Inc()
	i.log.Warn("instance killed for exceeding its memory", zap.String("instance", l.id))
	_ = i.jnl.record(KindOOMKilled, map[string]any{"instance_id": l.id, "decision_id": l.decision,
		"package": l.pkgID, "version": l.version, "reason": runner.ReasonOOMKilled})
}

// release frees an instance's uid, scratch directory and cgroup once it
// is gone.
func (i *isolation) release(in *instance) {
	if in.sbx == nil {
		return
	}
	if err := in.sbx.Close(); err != nil {
		i.log.Warn("release instance isolation", zap.String("instance", in.id), zap.Error(err))
	}
}

// support is what this host enforces on the instances it starts, and
// false when it isolates nothing (no Isolator).
func (i *isolation) support() (sandbox.Support, bool) {
	if i.iso == nil {
		return sandbox.Support{}, false
	}
	return i.iso.Support(), true
}
