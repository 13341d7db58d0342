package main

import (
	"path/filepath"
	"time"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctlraft"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/sandbox"
	"github.com/nodeld/nodeld/internal/table"
)

// newHost builds the workload host with its revocation list and signed
// facts source. It serves workload.ctl over the mesh when there is one,
// and the local operator's calls to "self" always.
func newHost(n *node, cfg *config.Config, d nodeDeps, rev *pkg.Revocations, iso *sandbox.Isolator) (*host.Host, error) {
	hc, err := host.FromConfig(cfg, d.id.PublicKey())
	if err != nil {
		return nil, err
	}
	hc.RestartPolicy = d.hooks.host.restart
	deps := host.Deps{Identity: d.id, Table: n.table, Audit: d.chain, Recorder: n.rec, Revocations: rev, Facts: n.facts,
		Logger: d.log.Named("host"), Registerer: d.reg, Now: d.now, Isolation: iso,
		StopFault: d.hooks.host.stopFault, ReplayWait: d.hooks.host.replayWait}
	if n.mesh != nil { // never a typed nil in the interface
		deps.Mesh = n.mesh
	}
	return host.New(hc, deps)
}

// newController builds the controller (plane.NewFromConfig) on the node's dispatcher, revocations,
// package store, placed store (<data_dir>/placed: a failover places those bytes) and its state in
// raft (internal/ctlraft): its own alone, or shared with controller.voters.
func newController(n *node, cfg *config.Config, d nodeDeps, rev *pkg.Revocations, store *pkg.Store) (*plane.Controller, error) {
	anchors, err := plane.Anchors(cfg)
	if err != nil {
		return nil, err
	}
	pd := dispatch.NewForController(n.dispatch, dispatch.ForControllerDeps{Revocations: rev, Anchors: anchors, Hooks: d.hooks.place,
		Term: func() uint64 { return n.ctrl.Term() }}) // every call carries the term it leads in (fencing)
	deps := plane.Deps{Dispatcher: pd, Now: d.now, Chain: d.chain, Logger: d.log, Registerer: d.reg, Store: store, Revocations: rev, ManualTicks: d.hooks.manualTicks,
		Placed: pkg.NewPlacedStoreBeside(filepath.Join(cfg.Node.DataDir, pkg.PlacedDir), store)}
	if d.hooks.stateFile { // tests: a controller of a version before raft
		deps.StatePath = filepath.Join(cfg.Node.DataDir, plane.StateFile)
	} else if n.raft, err = ctlraft.NewFromConfig(cfg, n.id.ID(), n.mesh, ctlraft.Deps{Logger: d.log, Registerer: d.reg, Now: d.now, Tune: d.hooks.raft.Tune, FirstBootWait: d.hooks.raft.FirstBootWait}); err != nil {
		return nil, err
	} else if deps.State = n.raft; len(cfg.Controller.Voters) > 0 { // alone, it always leads
		deps.Leadership = n.raft
	}
	src := plane.Source{Config: n.config, Ref: n.refs.ResolveOrWritten, Self: n.id, SetAnchors: pd.SetAnchors}
	if n.mesh != nil {
		src.Pinned = n.refs.PinnedKeys
	}
	return plane.NewFromConfig(cfg, src, deps)
}

// applyRolePolicy applies the role policies of the config in force, with
// the allowlists' peers as the mesh resolves them now.
func (n *node) applyRolePolicy() { n.table.ApplyPolicy(n.refs.RolePolicies(n.config())) }

// peersChanged is the mesh's OnPeersChanged: a peer pinned on first
// contact (or a config change) altered who is who, so the allowlists and
// the controller's targets and node references are resolved again.
func (n *node) peersChanged() {
	n.applyRolePolicy()
	if n.ctrl != nil {
		n.ctrl.Refresh()
	}
}

// adoptedSlots is the table as the Adopter's registrar: it registers the
// Adopter's instances as adopted ones, which a placed instance of the same
// role serves before.
type adoptedSlots struct{ t *table.Table }

func (a adoptedSlots) RegisterLocal(role, base, model, api, runtime string) (runner.LocalSlot, error) {
	s, err := a.t.RegisterLocal(table.OriginAdopted, role, base, model, api, runtime)
	if err != nil {
		return nil, err // not a nil *table.LocalSlot in a non-nil interface
	}
	return s, nil
}

// proxyPerf hands the proxy's measurements of local instances to the
// signed facts, which must not import the proxy: the time to first byte
// in milliseconds and the tokens per second of each role, once each rests
// on facts.MinPerfSamples requests.
type proxyPerf struct{ p *proxy.Proxy }

func (a proxyPerf) InferPerf() []facts.InferPerf {
	var out []facts.InferPerf
	for _, rp := range a.p.LocalPerf(facts.MinPerfSamples) {
		if rp.TTFBSamples >= facts.MinPerfSamples {
			out = append(out, facts.InferPerf{Role: rp.Role, Metric: grammar.PerfMetricTTFBMillis,
				Value: float64(rp.TTFB) / float64(time.Millisecond), Samples: rp.TTFBSamples})
		}
		if rp.TokensSamples >= facts.MinPerfSamples {
			out = append(out, facts.InferPerf{Role: rp.Role, Metric: grammar.PerfMetricTokensPerSecond,
				Value: rp.TokensPerSecond, Samples: rp.TokensSamples})
		}
	}
	return out
}

// status assembles /v1/status from the components' own snapshots.
func (n *node) status() any {
	src := operator.StatusSources{
		NodeID: n.id.ID(), PublicKey: n.id.PublicKeyHex(), Version: buildVersion(), ConfigPath: n.cfgPath, Started: n.started,
		Config: func() (*config.Config, string) { return n.config(), n.reloader.LastError() },
		Ready:  func() bool { ok, _ := n.admin.Ready(); return ok },
		Chain:  n.chain, Table: n.table, Roles: n.proxy, Host: n.host, Instances: n.adopter,
		Controller: n.router.ControllerStatus,
	}
	if n.mesh != nil {
		src.Mesh = n.mesh
	}
	return operator.NodeStatus(src, time.Now())
}
