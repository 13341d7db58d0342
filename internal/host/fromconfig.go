package host

import (
	"crypto/ed25519"
	"fmt"
	"slices"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/sandbox"
)

// FromConfig maps the host section, node.labels and node.class: the one
// mapping config check, run and a reload use; keys were validated with
// the config. self, on a node that runs the controller, is a controller
// of its own host too (its self target), as if host.controllers listed
// it; config check passes nil.
func FromConfig(cfg *config.Config, self ed25519.PublicKey) (Config, error) {
	hc := Config{Enabled: cfg.Host.Enabled, DataDir: cfg.Node.DataDir, Labels: cfg.Node.Labels, Class: cfg.Node.Class}
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
	if self != nil && cfg.Controller.Enabled && !slices.ContainsFunc(hc.Controllers, func(k ed25519.PublicKey) bool { return k.Equal(self) }) {
		hc.Controllers = append(hc.Controllers, self)
	}
	return hc, nil
}

// NewIsolator builds the isolation of placed instances from
// host.isolation: what this machine and daemon can enforce is detected
// once, here.
func NewIsolator(cfg *config.Config, nodeID string) (*sandbox.Isolator, error) {
	iso := cfg.Host.Isolation
	first, count, err := config.ParseUIDRange(iso.UIDRange)
	if err != nil {
		return nil, fmt.Errorf("host.isolation.uid_range: %w", err)
	}
	return sandbox.New(sandbox.Config{
		Filesystem: iso.Filesystem, Resources: iso.Resources, Users: iso.Users,
		UIDFirst: first, UIDCount: count, PidsMax: iso.PidsMax, ReadPaths: iso.ReadPaths,
		DataDir: cfg.Node.DataDir, NodeID: nodeID,
	})
}
