package mesh

import (
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/table"
)

// NodeRefs is the running node's one resolver of node references: the
// dispatcher, the operator, the controller, the role allowlists and a
// reload's check all resolve through it, the one way config check does
// (config.ResolveNodeRef), with what this node knows: its own id, and the
// ids its mesh knows by peer address (configured or pinned on first
// contact). Config check, without a running node, reads the same from
// the data dir (KnownNodesIn).
type NodeRefs struct {
	// Self is this node's id.
	Self string
	// Mesh is this node's mesh; nil: it has no peers.
	Mesh *Mesh
	// Config is the config in force.
	Config func() *config.Config
}

// Known is what names nodes now.
func (r NodeRefs) Known() config.KnownNodes {
	k := config.KnownNodes{SelfID: r.Self, Pinned: map[string]string{}}
	for _, p := range r.peers() {
		if p.ID != "" {
			k.Pinned[p.Addr] = p.ID
		}
	}
	return k
}

// Resolve resolves ref: "self", this node's id or its node.name is this
// node; a configured peer's name or id is its node id once its key is
// known. ok is false for anything else, returned as it is.
func (r NodeRefs) Resolve(ref string) (string, bool) {
	id, kind := config.ResolveNodeRef(r.Config(), r.Known(), ref)
	return id, kind == config.RefSelf || kind == config.RefPeer
}

// ResolveOrWritten is Resolve's id: the reference as written when it
// names no known node.
func (r NodeRefs) ResolveOrWritten(ref string) string {
	id, _ := r.Resolve(ref)
	return id
}

// PeerIDs turns allowlist entries (peer names or node ids) into node ids.
// A named peer not yet pinned has no id until its first contact, so it is
// left out until then (the mesh's OnPeersChanged re-applies). Without a
// mesh there are no peers: config validation refuses allowlists that
// name none.
func (r NodeRefs) PeerIDs(refs []string) []string {
	if r.Mesh == nil {
		return nil
	}
	var ids []string
	for _, ref := range refs {
		if id, ok := r.Mesh.ResolveRef(ref); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// RolePolicies maps inference.roles to the table's role policies, with
// the allowlists' peers as PeerIDs resolves them now (a reload, or a peer
// pinned on first contact, applies them again).
func (r NodeRefs) RolePolicies(cfg *config.Config) map[string]table.RolePolicy {
	p := make(map[string]table.RolePolicy, len(cfg.Inference.Roles))
	for _, role := range cfg.Inference.Roles {
		p[role.Name] = table.RolePolicy{Expose: role.Expose, ServeTo: r.PeerIDs(role.ServeTo), UseFrom: r.PeerIDs(role.UseFrom)}
	}
	return p
}

// PeerNames are the configured names of the mesh's peers, by node id.
func (r NodeRefs) PeerNames() map[string]string {
	names := map[string]string{}
	for _, p := range r.peers() {
		if p.ID != "" && p.Name != "" {
			names[p.ID] = p.Name
		}
	}
	return names
}

// PinnedKeys are the peer keys the mesh knows, by peer address.
func (r NodeRefs) PinnedKeys() map[string]string {
	pinned := map[string]string{}
	for _, p := range r.peers() {
		if p.Key != "" {
			pinned[p.Addr] = p.Key
		}
	}
	return pinned
}

func (r NodeRefs) peers() []PeerStatus {
	if r.Mesh == nil {
		return nil
	}
	return r.Mesh.Status()
}

// KnownNodesIn reads what names nodes from dataDir, for config check and
// a start: this node's id from its key, the first-contact pins from
// known_peers.json. What it cannot read is left out (and said by
// config.CheckNodeRefs when a reference needed it).
func KnownNodesIn(dataDir string) config.KnownNodes {
	var k config.KnownNodes
	if id, err := identity.Load(identity.KeyPath(dataDir)); err == nil {
		k.SelfID = id.ID()
	}
	pins, err := ReadPins(dataDir)
	if err != nil {
		k.PinsErr = err
	}
	k.Pinned = pins
	return k
}
