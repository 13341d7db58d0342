package main

// The controller's wiring: it is built from the node's config in force
// (plane.NewFromConfig) on the node's dispatcher, with the node's
// resolver of node references and the mesh's pinned keys.

import (
	"context"
	"path/filepath"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
)

// newController builds the controller on the node's dispatcher and
// revocation list, and returns it with the package store in the data dir
// it resolves package ids with. It starts nothing.
func newController(n *node, cfg *config.Config, d nodeDeps, rev *pkg.Revocations) (*plane.Controller, *pkg.Store, error) {
	anchors, err := plane.Anchors(cfg)
	if err != nil {
		return nil, nil, err
	}
	pd := dispatch.NewForController(n.dispatch, dispatch.ForControllerDeps{
		Revocations: rev, Anchors: anchors, Hooks: d.hooks.place,
	})
	store := pkg.NewStore(filepath.Join(cfg.Node.DataDir, pkg.StoreDir), rev)
	var revs plane.Revocations
	if rev != nil {
		revs = rev // the start verb consults the node's list
	}
	src := plane.Source{Config: n.config, Ref: n.refOrWritten, Self: n.id, SetAnchors: pd.SetAnchors}
	if n.mesh != nil {
		src.Pinned = n.pinnedKeys
	}
	c, err := plane.NewFromConfig(cfg, src, plane.Deps{
		Now:        d.now,
		Chain:      d.chain,
		Dispatcher: pd,
		StatePath:  filepath.Join(cfg.Node.DataDir, plane.StateFile),
		Logger:     d.log,
		Registerer: d.reg,
		// Declared workloads, and ctl place by package id, come from
		// <data_dir>/store (nodeld package add).
		Store:       store,
		Revocations: revs,
		// What an operator placement placed is kept in <data_dir>/placed:
		// its failover places those bytes.
		Placed:      placedStore{PlacedStore: pkg.NewPlacedStore(filepath.Join(cfg.Node.DataDir, pkg.PlacedDir)), store: store.Root()},
		ManualTicks: d.hooks.manualTicks,
	})
	if err != nil {
		return nil, nil, err
	}
	return c, store, nil
}

// pinnedKeys are the peer keys the mesh knows, by peer address.
func (n *node) pinnedKeys() map[string]string {
	pinned := map[string]string{}
	for _, p := range n.mesh.Status() {
		if p.Key != "" {
			pinned[p.Addr] = p.Key
		}
	}
	return pinned
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
		n.ctrl.PeerStopped(peer)
	}
}
