package config

import (
	"fmt"
	"strconv"
)

// KnownNodes is what names nodes beyond the config file itself: this
// node's own id (from its key in node.data_dir) and the node ids the
// mesh pinned on first contact, by configured peer address
// (known_peers.json). The running daemon takes both from itself; config
// check reads them from the data dir.
type KnownNodes struct {
	// SelfID is this node's id; "" when unknown (its key not read).
	SelfID string
	// Pinned maps a peer address to the node id of the key pinned there.
	Pinned map[string]string
	// PinsErr, when set, is why the pins could not be read: an id that
	// might have been pinned is refused with it as a hint.
	PinsErr error
}

// RefKind is what a node reference names.
type RefKind int

const (
	// RefUnknown names no node this one knows.
	RefUnknown RefKind = iota
	// RefSelf names this node ("self", its node.name or its id).
	RefSelf
	// RefPeer names a configured peer whose key (configured or pinned)
	// is known: the id is its node id.
	RefPeer
	// RefPending names, by name, a configured peer whose key is not
	// known yet (pinned on first contact): it resolves once pinned.
	RefPending
)

// ResolveNodeRef resolves a node reference of the controller (a
// workload's node, prefer or avoid, an operator's place, a policy's
// deny_nodes) the one way nodeld does, in this order:
//
//  1. "self", this node's node.name, or its own node id: this node;
//  2. a configured peer's name: that peer, by node id once its key is
//     known (configured, or pinned on first contact), else pending;
//  3. a node id: the configured peer whose configured or pinned key has
//     that id.
//
// Anything else is unknown. The id returned is the node id, or the
// reference as written when it is pending or unknown.
func ResolveNodeRef(cfg *Config, known KnownNodes, ref string) (string, RefKind) {
	switch {
	case ref == "":
		return ref, RefUnknown
	case ref == SelfRef, known.SelfID != "" && ref == known.SelfID, cfg.Node.Name != "" && ref == cfg.Node.Name:
		if known.SelfID == "" {
			return ref, RefSelf
		}
		return known.SelfID, RefSelf
	}
	peerID := func(p Peer) string {
		if id := keyNodeID(p.Key); id != "" {
			return id
		}
		return known.Pinned[p.Addr]
	}
	for _, p := range cfg.Mesh.Peers {
		if p.Name != "" && p.Name == ref {
			if id := peerID(p); id != "" {
				return id, RefPeer
			}
			return ref, RefPending
		}
	}
	if isNodeIDRef(ref) {
		for _, p := range cfg.Mesh.Peers {
			if peerID(p) == ref {
				return ref, RefPeer
			}
		}
	}
	return ref, RefUnknown
}

// CheckNodeRefs refuses every node reference of the declared workloads
// (controller.workloads[].node, prefer, avoid, on_demand.demand_from) that names no node this
// one knows (ResolveNodeRef), each a *ValidationError at its line: at run
// time an unknown pin would be retried for ever and an unknown prefer or
// avoid dropped in silence.
func CheckNodeRefs(cfg *Config, known KnownNodes) []error {
	var errs []error
	check := func(path, ref string) {
		if _, kind := ResolveNodeRef(cfg, known, ref); kind != RefUnknown {
			return
		}
		msg := fmt.Sprintf("%q names no known node: use self, node.name, a mesh.peers name, or the node id of a peer whose key is configured or pinned", ref)
		switch {
		case isNodeIDRef(ref) && known.SelfID == "":
			msg += " (this node's own id is not known: its key in node.data_dir was not read)"
		case isNodeIDRef(ref) && known.PinsErr != nil:
			msg += fmt.Sprintf(" (the first-contact pins were not read: %v)", known.PinsErr)
		}
		errs = append(errs, &ValidationError{Line: cfg.Line(path), Path: path, Msg: msg})
	}
	for i, w := range cfg.Controller.Workloads {
		base := "controller.workloads[" + strconv.Itoa(i) + "]"
		if w.Node != "" {
			check(base+".node", w.Node)
		}
		for j, ref := range w.Prefer {
			check(base+".prefer["+strconv.Itoa(j)+"]", ref)
		}
		for j, ref := range w.Avoid {
			check(base+".avoid["+strconv.Itoa(j)+"]", ref)
		}
		for j, ref := range w.OnDemand.DemandFrom {
			check(base+".on_demand.demand_from["+strconv.Itoa(j)+"]", ref)
		}
	}
	return errs
}

// CheckNodeRefsFile is CheckNodeRefs as a *FileError naming file (for
// config check, a start and a reload), nil when every reference names a
// known node.
func CheckNodeRefsFile(cfg *Config, file string, known KnownNodes) error {
	if errs := CheckNodeRefs(cfg, known); len(errs) > 0 {
		return &FileError{File: file, Errs: errs}
	}
	return nil
}
