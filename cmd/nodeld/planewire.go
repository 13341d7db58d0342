package main

// The controller's wiring: its config from the controller section, its
// targets from mesh.peers and the host, the adapter that lets it call
// nodes through the dispatcher, and the component that runs its loop and
// applies new targets.

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/reload"
)

// controllerStateFile is the controller's state file in node.data_dir.
const controllerStateFile = "controller.json"

// tierTrust maps a config tier to the engine's trust tier
// (engine.ParseTrust: both take the words from grammar.TrustTiers); an
// unknown tier (config validation refuses it) is the lowest.
func tierTrust(tier string) engine.Trust {
	if t, ok := engine.ParseTrust(tier); ok {
		return t
	}
	return engine.TrustDiscovered
}

// controllerConfig maps the controller section onto the plane's config.
// ref resolves a node reference (a peer name, a node id, "self") to a
// node id, and returns what it cannot resolve as it is written (a peer
// pinned on first contact has no id until then; the next resolution,
// when it is pinned, finds it).
func controllerConfig(cfg *config.Config, ref func(string) string) plane.Config {
	cc := cfg.Controller
	c := plane.Default()
	c.Tick, c.DeadAfter, c.RetryBackoff = cc.Tick.D, cc.DeadAfter.D, cc.RetryBackoff.D
	c.MaxReschedules, c.RescheduleWindow = cc.MaxReschedules, cc.RescheduleWindow.D
	c.DescribeTimeout, c.PlaceTimeout = cc.DescribeTimeout.D, cc.PlaceTimeout.D
	refs := func(in []string) []string {
		if len(in) == 0 {
			return nil
		}
		out := make([]string, len(in))
		for i, r := range in {
			out[i] = ref(r)
		}
		return out
	}
	if len(cc.Policy.Kinds) > 0 {
		c.Policy.Kinds = make(map[string]plane.KindRule, len(cc.Policy.Kinds))
		for k, r := range cc.Policy.Kinds {
			c.Policy.Kinds[k] = plane.KindRule{MinTier: tierTrust(r.MinTier)}
		}
	}
	c.Policy.DenyNodes = refs(cc.Policy.DenyNodes)
	c.Policy.DenyLabels = maps.Clone(cc.Policy.DenyLabels)
	for _, w := range cc.Workloads {
		pw := plane.Workload{
			Name: w.Name, Package: w.Package, Version: w.Version, Variant: w.Variant,
			Prefer: refs(w.Prefer), Avoid: refs(w.Avoid), Replicas: w.Replicas,
			AllowEmulated: w.AllowEmulated,
		}
		if w.Node != "" {
			pw.Node = ref(w.Node)
		}
		c.Workloads = append(c.Workloads, pw)
	}
	return c
}

// asWritten is the node reference resolver of static checks.
func asWritten(ref string) string { return ref }

// controllerAnchorKeys are the publisher keys the controller verifies
// packages against, as written, and the key that gave them:
// controller.trust_anchors, else host.trust_anchors.
func controllerAnchorKeys(cfg *config.Config) (keys []string, key string) {
	if len(cfg.Controller.TrustAnchors) > 0 {
		return cfg.Controller.TrustAnchors, "controller.trust_anchors"
	}
	return cfg.Host.TrustAnchors, "host.trust_anchors"
}

// controllerAnchors are controllerAnchorKeys parsed.
func controllerAnchors(cfg *config.Config) (pkg.Anchors, error) {
	keys, key := controllerAnchorKeys(cfg)
	a, err := config.ParseKeys(key, keys)
	if err != nil {
		return nil, err
	}
	return pkg.Anchors(a), nil
}

// controllerNotes are what config check says about a controller that
// will run but cannot place anything, besides the problems it refuses.
func controllerNotes(cfg *config.Config) []string {
	cc := cfg.Controller
	if !cc.Enabled {
		return nil
	}
	var notes []string
	if len(cc.Policy.Kinds) == 0 {
		notes = append(notes, "controller.enabled with no controller.policy.kinds: nothing will be placed (governance is default deny; list the workload kinds it may place)")
	}
	if !cfg.Host.Enabled && len(cfg.Mesh.Peers) == 0 {
		notes = append(notes, "controller.enabled with no mesh.peers and host.enabled false: the controller has no node to place on")
	}
	if len(cc.TrustAnchors) == 0 && len(cfg.Host.TrustAnchors) == 0 {
		notes = append(notes, "controller.enabled with no controller.trust_anchors nor host.trust_anchors: no package verifies, so nothing will be placed")
	}
	return notes
}

// resolveRef resolves a node reference the one way config check does
// (config.ResolveNodeRef, with what this daemon knows): "self", this
// node's id or its node.name is this node; a configured peer's name or id
// is its node id once its key is known. ok is false for anything else,
// returned as it is.
func (n *node) resolveRef(ref string) (string, bool) {
	id, kind := config.ResolveNodeRef(n.config(), n.knownNodes(), ref)
	return id, kind == config.RefSelf || kind == config.RefPeer
}

func (n *node) refOrWritten(ref string) string {
	id, _ := n.resolveRef(ref)
	return id
}

// configuredTargets are the nodes cfg names as targets: this node itself
// when its host is enabled (tier pinned; never otherwise, even when
// mesh.peers names its key), and every other mesh peer whose key is known, configured or pinned on first contact (tier from config; the
// key binds the tier, never the address). A peer whose key is not known
// yet becomes a target once it is pinned (OnPeersChanged).
func (n *node) configuredTargets(cfg *config.Config) []plane.Target {
	if n.mesh == nil {
		return targetsOf(cfg, n.id, nil)
	}
	pinned := map[string]string{}
	for _, p := range n.mesh.Status() {
		if p.Key != "" {
			pinned[p.Addr] = p.Key
		}
	}
	return targetsOf(cfg, n.id, pinned)
}

// targetsOf is configuredTargets for node self, with pinned the keys the
// mesh pinned by peer address (nil without a mesh: then no peer is a
// target).
func targetsOf(cfg *config.Config, self *identity.Identity, pinned map[string]string) []plane.Target {
	var ts []plane.Target
	seen := map[string]bool{}
	if cfg.Host.Enabled {
		ts = append(ts, plane.Target{ID: self.ID(), Key: self.PublicKey(), Tier: engine.TrustPinned, Self: true})
		seen[self.ID()] = true
	}
	if pinned == nil {
		return ts
	}
	for _, p := range cfg.Mesh.Peers {
		k := p.Key
		if k == "" {
			k = pinned[p.Addr]
		}
		pub, err := config.ParseKey(k)
		if err != nil {
			continue // not known yet
		}
		id := identity.NodeID(pub)
		if seen[id] || id == self.ID() {
			// This node is a target only as itself, when its host is
			// enabled, whatever mesh.peers says.
			continue
		}
		seen[id] = true
		ts = append(ts, plane.Target{ID: id, Key: pub, Tier: tierTrust(p.Tier)})
	}
	return ts
}

// controllerRunner runs the controller's loop and applies its targets and
// config again whenever they may have changed: after a reload and when a
// peer's key is pinned on first contact (refresh). SetTargets waits for a
// tick in progress, so it is applied here, on the runner's goroutine, not
// by the reload or the mesh callback that asks for it.
type controllerRunner struct {
	n    *node
	c    *plane.Controller
	disp *dispatch.ForController
	log  *zap.Logger
	// store is the package store in the data dir.
	store *pkg.Store
	// manual (tests only: testHooks.manualTicks) leaves the loop
	// unstarted: the test ticks the controller, and a tick applies what
	// was handed over first.
	manual bool

	mu sync.Mutex // serialises refresh; guards applied
	// applied are the targets last handed to the controller, by node id.
	applied map[string]plane.Target
}

// newController builds the controller on the node's dispatcher and
// revocation list, with the targets cfg names. It starts nothing.
func newController(n *node, cfg *config.Config, d nodeDeps, rev *pkg.Revocations) (*controllerRunner, error) {
	anchors, err := controllerAnchors(cfg)
	if err != nil {
		return nil, err
	}
	pd := dispatch.NewForController(n.dispatch, dispatch.ForControllerDeps{
		Revocations: rev, Anchors: anchors, Hooks: d.hooks.place,
	})
	r := &controllerRunner{n: n, disp: pd, log: d.log.Named("controller"),
		store: pkg.NewStore(filepath.Join(cfg.Node.DataDir, pkg.StoreDir), rev), manual: d.hooks.manualTicks}
	ts := r.targets(cfg, nil)
	var revs plane.Revocations
	if rev != nil {
		revs = rev // the start verb consults the node's list
	}
	c, err := plane.New(controllerConfig(cfg, n.refOrWritten), ts, plane.Deps{
		Now:        d.now,
		Chain:      d.chain,
		Dispatcher: pd,
		StatePath:  filepath.Join(cfg.Node.DataDir, controllerStateFile),
		Logger:     d.log,
		Registerer: d.reg,
		// Declared workloads, and ctl place by package id, come from
		// <data_dir>/store (nodeld package add).
		Store:       r.store,
		Revocations: revs,
		// What an operator placement placed is kept in <data_dir>/placed:
		// its failover places those bytes.
		Placed: placedStore{PlacedStore: pkg.NewPlacedStore(filepath.Join(cfg.Node.DataDir, pkg.PlacedDir)), store: r.store.Root()},
	})
	if err != nil {
		return nil, err
	}
	r.c = c
	r.applied = byID(ts)
	for _, note := range controllerNotes(cfg) {
		r.log.Warn(note)
	}
	return r, nil
}

func byID(ts []plane.Target) map[string]plane.Target {
	m := make(map[string]plane.Target, len(ts))
	for _, t := range ts {
		m[t.ID] = t
	}
	return m
}

// targets are cfg's targets (configuredTargets), plus every target of
// before that cfg no longer names but that still holds placements,
// demoted to discovered and no longer self: a peer removed from
// mesh.peers loses its link, so its placements become lost after
// dead_after and move, and its instances can still be stopped and
// unloaded while it answers.
func (r *controllerRunner) targets(cfg *config.Config, before map[string]plane.Target) []plane.Target {
	ts := r.n.configuredTargets(cfg)
	if len(before) == 0 || r.c == nil {
		return ts
	}
	named := byID(ts)
	holds := map[string]bool{}
	for _, p := range r.c.Placements() {
		holds[p.Node] = true
	}
	for _, id := range slices.Sorted(maps.Keys(before)) {
		if _, ok := named[id]; ok || !holds[id] {
			continue
		}
		t := before[id]
		t.Tier, t.Self = engine.TrustDiscovered, false
		ts = append(ts, t)
	}
	return ts
}

// prepare checks a reload's controller config, anchors and targets; the
// commit swaps the anchors and hands the controller its config and targets
// resolved again (refresh): it comes after the config in force and the
// mesh's peers changed, so names of peers new in next resolve.
func (r *controllerRunner) prepare(next *config.Config) (reload.Prepared, error) {
	var errs []error
	anchors, err := controllerAnchors(next)
	if err != nil {
		errs = append(errs, err)
	}
	r.mu.Lock()
	ts := r.targets(next, r.applied)
	r.mu.Unlock()
	// The controller checks what next resolves to now; the commit hands
	// over what it resolves to then (refresh), so this change is a check.
	if p, err := r.c.Prepare(controllerConfig(next, r.n.refOrWritten), ts); err != nil {
		errs = append(errs, err)
	} else {
		p.Abort()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return reload.Commit(func() {
		r.disp.SetAnchors(anchors)
		r.refresh()
	}), nil
}

// refresh resolves the config in force and its targets again (names of
// peers pinned since resolve now) and hands them to the controller, whose
// loop applies them.
func (r *controllerRunner) refresh() {
	cfg := r.n.config()
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := r.targets(cfg, r.applied)
	r.applied = byID(ts)
	r.c.Reconfigure(controllerConfig(cfg, r.n.refOrWritten), ts)
}

// Run runs the controller's loop until ctx ends.
func (r *controllerRunner) Run(ctx context.Context) error {
	if r.manual {
		// The test ticks itself.
		<-ctx.Done()
		return nil
	}
	return r.c.Run(ctx)
}

// placedStore keeps placed packages in <data_dir>/placed, but for those
// placed from the package store (ctl place PACKAGE-ID): the store never
// replaces a version, so its directory is kept as it is rather than
// copied (a model's weights are not stored twice).
type placedStore struct {
	*pkg.PlacedStore
	store string
}

func (s placedStore) Keep(ctx context.Context, v *pkg.Verified) (string, error) {
	if rel, err := filepath.Rel(s.store, v.Dir); err == nil && filepath.IsLocal(rel) {
		return v.Dir, nil
	}
	return s.PlacedStore.Keep(ctx, v)
}

// peerStopped is the mesh's OnPeerStopped: the peer closed its link
// stopping and did not come back within the restart wait, so the
// controller counts it dead now rather than after dead_after.
func (n *node) peerStopped(peer string) {
	if n.ctrl != nil {
		n.ctrl.c.PeerStopped(peer)
	}
}
