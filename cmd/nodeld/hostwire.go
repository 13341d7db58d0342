package main

import (
	"context"
	"crypto/ed25519"
	"io"
	"net"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/sandbox"
)

// hostConfig maps the host section; keys were validated with the config.
func hostConfig(cfg *config.Config) (host.Config, error) {
	hc := host.Config{Enabled: cfg.Host.Enabled, DataDir: cfg.Node.DataDir, Labels: cfg.Node.Labels, Class: cfg.Node.Class}
	var err error
	if hc.Controllers, err = config.ParseKeys("host.controllers", cfg.Host.Controllers); err != nil {
		return hc, err
	}
	// A reader is a key, or a configured peer's name that the host
	// resolves through the mesh (its key may be pinned on first contact).
	for _, r := range cfg.Host.Readers {
		if pub, err := config.ParseKey(r); err == nil {
			hc.ReaderKeys = append(hc.ReaderKeys, pub)
		} else {
			hc.ReaderPeers = append(hc.ReaderPeers, r)
		}
	}
	anchors, err := config.ParseKeys("host.trust_anchors", cfg.Host.TrustAnchors)
	if err != nil {
		return hc, err
	}
	hc.TrustAnchors = pkg.Anchors(anchors)
	return hc, nil
}

// nodeHostConfig is hostConfig for this node: a node that runs the
// controller is a controller of its own host too (its self target), as if
// its key were listed in host.controllers.
func nodeHostConfig(cfg *config.Config, id *identity.Identity) (host.Config, error) {
	hc, err := hostConfig(cfg)
	if err != nil || !cfg.Controller.Enabled {
		return hc, err
	}
	if !slices.ContainsFunc(hc.Controllers, func(k ed25519.PublicKey) bool { return k.Equal(id.PublicKey()) }) {
		hc.Controllers = append(hc.Controllers, id.PublicKey())
	}
	return hc, nil
}

// newFacts builds the node's signed facts source: node.labels, node.class and the
// proxy's measurements of local instances (perf), signed with the node
// key under a seq kept in the data dir.
func newFacts(cfg *config.Config, id *identity.Identity, perf facts.PerfSource, probe *facts.ProbeDeps, now func() time.Time, iso sandbox.Support) (*facts.Source, error) {
	seq, err := facts.OpenSeqStore(cfg.Node.DataDir)
	if err != nil {
		return nil, err
	}
	pd := facts.DefaultProbeDeps()
	if probe != nil {
		pd = *probe
	}
	extra, notes := isolationFacts(iso)
	return facts.NewSource(pd, id.PrivateKey(), cfg.Node.Labels, seq, facts.SourceOptions{
		Perf: perf, Now: now, Class: cfg.Node.Class, Extra: extra, ExtraNotes: notes})
}

// newHost builds the workload host with its revocation list and signed
// facts source. It serves workload.ctl over the mesh when there is one,
// and the local operator's calls to "self" always.
func newHost(cfg *config.Config, id *identity.Identity, n *node, ch *chain.Chain, rec *chain.Recorder, rev *pkg.Revocations, src *facts.Source,
	reg prometheus.Registerer, log *zap.Logger, hooks hostHooks, iso *sandbox.Isolator) (*host.Host, error) {
	hc, err := nodeHostConfig(cfg, id)
	if err != nil {
		return nil, err
	}
	hc.RestartPolicy = hooks.restart
	deps := host.Deps{
		Identity: id, Table: n.table, Audit: ch, Recorder: rec, Revocations: rev, Facts: src,
		Logger: log.Named("host"), Registerer: reg, Now: n.now,
		StopFault: hooks.stopFault, ReplayWait: hooks.replayWait, Isolation: iso,
	}
	if n.mesh != nil { // never a typed nil in the interface
		deps.Mesh = n.mesh
	}
	return host.New(hc, deps)
}

// hostHooks are the host's test hooks (testHooks.host: host.Deps'
// StopFault and ReplayWait, and the restart policy); nil in the daemon.
type hostHooks struct {
	stopFault  func(instanceID string) error
	replayWait func(ctx context.Context, peerID string, sent int) error
	// restart, when set, is the host's restart policy (tests only).
	restart runner.RestartPolicy
}

// localHost lets the operator's calls to "self" reach this node's host
// without the mesh: the request goes over an in-memory stream, and the
// host fetches the package from the dispatcher over another one.
type localHost struct{ n *node }

var _ dispatch.LocalHost = (*localHost)(nil)

func (s *localHost) ServeLocal(ctx context.Context, st ctl.Stream) {
	selfID := s.n.id.ID()
	err := s.n.host.ServeLocal(ctx, st, func(ctx context.Context) (io.ReadWriteCloser, error) {
		hostEnd, dispatchEnd := net.Pipe()
		// Owned by the pipe: it ends when the host closes its end or ctx
		// ends, which ServeArtifact watches.
		go func() {
			defer dispatchEnd.Close()
			if err := s.n.dispatch.ServeArtifact(ctx, selfID, dispatchEnd); err != nil {
				s.n.log.Debug("self artifact stream ended", zap.Error(err))
			}
		}()
		return hostEnd, nil
	})
	if err != nil {
		s.n.log.Debug("local ctl call ended", zap.Error(err))
	}
}
