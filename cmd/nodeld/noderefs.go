package main

// The node references of the declared workloads (controller.workloads[]
// node, prefer, avoid) must name a node this one knows. Where that truth
// lives: this node's own id is its key in node.data_dir; a peer's id is
// its configured key, or the key the mesh pinned on first contact
// (known_peers.json in node.data_dir). The running daemon has both in
// memory (its identity, its mesh); config check, run by the operator
// before a start or a reload, reads them from the data dir, and says so
// when it cannot. A peer named by its mesh.peers name is known whether or
// not its key is known yet: it resolves once pinned.

import (
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
)

// checkNodeRefs is config.CheckNodeRefs as a *config.FileError naming
// file, nil when every reference names a known node.
func checkNodeRefs(cfg *config.Config, file string, known config.KnownNodes) error {
	errs := config.CheckNodeRefs(cfg, known)
	if len(errs) == 0 {
		return nil
	}
	return &config.FileError{File: file, Errs: errs}
}

// knownNodesIn reads what names nodes from dataDir, for config check:
// this node's id from its key, the first-contact pins from
// known_peers.json. What it cannot read is left out (and said by
// CheckNodeRefs when a reference needed it).
func knownNodesIn(dataDir string) config.KnownNodes {
	var k config.KnownNodes
	if id, err := identity.Load(identity.KeyPath(dataDir)); err == nil {
		k.SelfID = id.ID()
	}
	pins, err := mesh.ReadPins(dataDir)
	if err != nil {
		k.PinsErr = err
	}
	k.Pinned = pins
	return k
}

// knownNodes is what names nodes in the running daemon: its own id and
// the ids its mesh knows by peer address (configured or pinned).
func (n *node) knownNodes() config.KnownNodes {
	k := config.KnownNodes{SelfID: n.id.ID(), Pinned: map[string]string{}}
	if n.mesh != nil {
		for _, p := range n.mesh.Status() {
			if p.ID != "" {
				k.Pinned[p.Addr] = p.ID
			}
		}
	}
	return k
}

// peerNames are the configured names of the mesh's peers, by node id.
func (n *node) peerNames() map[string]string {
	names := map[string]string{}
	if n.mesh != nil {
		for _, p := range n.mesh.Status() {
			if p.ID != "" && p.Name != "" {
				names[p.ID] = p.Name
			}
		}
	}
	return names
}
