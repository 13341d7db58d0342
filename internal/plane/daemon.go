package plane

// The controller as the daemon runs it: its config and targets resolved
// from the node's config in force, again on a reload and whenever a
// peer's key is pinned (Refresh); Run puts them in force between ticks.

import (
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/reload"
)

// Source is what a daemon's controller resolves its config and targets
// with (NewFromConfig).
type Source struct {
	// Config returns the node's config in force. Required.
	Config func() *config.Config
	// Ref resolves a node reference to a node id, returning what it cannot
	// resolve as written (ConfigOf); nil keeps references as written.
	Ref func(string) string
	// Self is this node. Required.
	Self *identity.Identity
	// Pinned returns the peer keys the mesh knows, by peer address; nil
	// means no mesh (no peer is a target).
	Pinned func() map[string]string
	// SetAnchors puts a reload's publisher keys in force (the
	// dispatcher's); nil drops them.
	SetAnchors func(pkg.Anchors)
}

// configured is the controller's link to the node's config: what it last
// handed over (Refresh).
type configured struct {
	src Source
	mu  sync.Mutex // serialises refresh; guards applied
	// applied are the targets last handed to the controller, by node id.
	applied map[string]Target
}

// NewFromConfig is New with the config and targets cfg (the node's config
// in force) resolves to through src; config check's notes about cfg are
// logged as warnings (logger "controller"). It starts nothing.
func NewFromConfig(cfg *config.Config, src Source, deps Deps) (*Controller, error) {
	if src.Config == nil || src.Self == nil {
		return nil, errors.New("controller: Source.Config and Source.Self are required")
	}
	k := &configured{src: src}
	ts := k.targets(nil, cfg, nil)
	c, err := New(ConfigOf(cfg, src.Ref), ts, deps)
	if err != nil {
		return nil, err
	}
	k.applied = byID(ts)
	c.fromConfig = k
	if deps.Logger != nil {
		for _, note := range ConfigNotes(cfg) {
			deps.Logger.Named("controller").Warn(note)
		}
	}
	return c, nil
}

func byID(ts []Target) map[string]Target {
	m := make(map[string]Target, len(ts))
	for _, t := range ts {
		m[t.ID] = t
	}
	return m
}

// targets are cfg's targets (TargetsOf), plus every target of before that
// cfg no longer names but that still holds placements of c, demoted to
// discovered and no longer self: a peer removed from mesh.peers loses its
// link, so its placements become lost after dead_after and move, and its
// instances can still be stopped and unloaded while it answers.
func (k *configured) targets(c *Controller, cfg *config.Config, before map[string]Target) []Target {
	var pinned map[string]string
	if k.src.Pinned != nil {
		pinned = k.src.Pinned()
	}
	ts := TargetsOf(cfg, k.src.Self, pinned)
	if len(before) == 0 || c == nil {
		return ts
	}
	named := byID(ts)
	holds := map[string]bool{}
	for _, p := range c.Placements() {
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

// PrepareReload checks a reload's controller config, anchors and targets
// (a controller made by NewFromConfig); the commit puts the anchors in
// force (Source.SetAnchors) and resolves the config in force again
// (Refresh): it comes after the config in force and the mesh's peers
// changed, so names of peers new in next resolve.
func (c *Controller) PrepareReload(next *config.Config) (reload.Prepared, error) {
	k := c.fromConfig
	if k == nil {
		return nil, errors.New("controller: not made from a config (NewFromConfig)")
	}
	var errs []error
	anchors, err := Anchors(next)
	if err != nil {
		errs = append(errs, err)
	}
	k.mu.Lock()
	ts := k.targets(c, next, k.applied)
	k.mu.Unlock()
	// The controller checks what next resolves to now; the commit hands
	// over what it resolves to then (Refresh), so this change is a check.
	if p, err := c.Prepare(ConfigOf(next, k.src.Ref), ts); err != nil {
		errs = append(errs, err)
	} else {
		p.Abort()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return reload.Commit(func() {
		if k.src.SetAnchors != nil {
			k.src.SetAnchors(anchors)
		}
		c.Refresh()
	}), nil
}

// Refresh resolves the node's config in force and its targets again
// (names of peers pinned since resolve now) and hands them to the loop
// (Reconfigure). A controller not made by NewFromConfig has nothing to
// refresh.
func (c *Controller) Refresh() {
	k := c.fromConfig
	if k == nil {
		return
	}
	cfg := k.src.Config()
	k.mu.Lock()
	defer k.mu.Unlock()
	ts := k.targets(c, cfg, k.applied)
	k.applied = byID(ts)
	c.Reconfigure(ConfigOf(cfg, k.src.Ref), ts)
}
