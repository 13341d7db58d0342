package table

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nodeld/nodeld/internal/grammar"
)

// RolePolicy is the configured mesh policy of one role.
type RolePolicy struct {
	// Expose lets this node's instance of the role serve mesh peers.
	Expose bool
	// ServeTo lists the peers (node ids) this node serves the role to.
	ServeTo []string
	// UseFrom lists the nodes (node ids) this node lets serve the role for
	// it.
	UseFrom []string
}

// policy is this node's mesh policy: which roles it exposes to peers at
// all, and per role which peers it serves (serve_to) and which nodes may
// serve it (use_from). Default deny both ways. Every change is audited.
type policy struct {
	c *core
	// allow (use_from, consumer side): role -> nodes that may serve this
	// node.
	allow map[string]map[string]struct{}
	// serveAllow (serve_to, serving side): role -> peers this node serves.
	serveAllow map[string]map[string]struct{}
	// exposed: roles whose local instance may serve mesh peers at all.
	exposed map[string]struct{}
}

func newPolicy(c *core) policy {
	return policy{
		c:          c,
		allow:      make(map[string]map[string]struct{}),
		serveAllow: make(map[string]map[string]struct{}),
		exposed:    make(map[string]struct{}),
	}
}

// AllowRemoteNode allows (on) or stops allowing node to serve role to this
// node: the consumer-side decision to send this node's prompts there.
// Without it no remote instance of role resolves, however it advertises.
// A change is audited (KindRemoteAllow) and bumps the generation;
// withdrawing stops resolution at once.
func (p *policy) AllowRemoteNode(role, node string, on bool) {
	var e effects
	p.c.mu.Lock()
	p.setAllowRemote(&e, role, node, on)
	p.c.mu.Unlock()
	p.c.finish(e)
}

func (p *policy) setAllowRemote(e *effects, role, node string, on bool) {
	if !setMember(p.allow, role, node, on) {
		return
	}
	e.events = append(e.events, auditEvent{KindRemoteAllow, RemoteAllowEvent{
		Role: role, Node: node, Allowed: on, Consumer: p.c.nodeID,
	}})
	p.c.bump(e)
}

// AllowMeshPeer allows (on) or stops allowing peer to use this node's
// instance of role: the serving-side counterpart of AllowRemoteNode.
// ExposeToMesh says the role may leave loopback at all; this says to whom.
// A change is audited (KindMeshAllow) and wakes subscribers (so the mesh
// can advertise to a newly listed peer) but, as in the original, does not
// bump the generation: no resolution depends on it.
func (p *policy) AllowMeshPeer(role, peer string, on bool) {
	var e effects
	p.c.mu.Lock()
	p.setAllowMeshPeer(&e, role, peer, on)
	p.c.mu.Unlock()
	p.c.finish(e)
}

func (p *policy) setAllowMeshPeer(e *effects, role, peer string, on bool) {
	if !setMember(p.serveAllow, role, peer, on) {
		return
	}
	e.events = append(e.events, auditEvent{KindMeshAllow, MeshAllowEvent{
		Role: role, Peer: peer, Allowed: on, Server: p.c.nodeID,
	}})
	e.notify = true
}

// ExposeToMesh allows (on) or stops serving role to mesh peers at all.
// Unexposed roles are neither advertised nor served. A change is audited
// (KindMeshExpose) and bumps the generation.
func (p *policy) ExposeToMesh(role string, on bool) {
	var e effects
	p.c.mu.Lock()
	p.setExposed(&e, role, on)
	p.c.mu.Unlock()
	p.c.finish(e)
}

func (p *policy) setExposed(e *effects, role string, on bool) {
	_, was := p.exposed[role]
	if was == on {
		return
	}
	if on {
		p.exposed[role] = struct{}{}
	} else {
		delete(p.exposed, role)
	}
	e.events = append(e.events, auditEvent{KindMeshExpose, ExposeEvent{
		Role: role, NodeID: p.c.nodeID, Exposed: on,
	}})
	p.c.bump(e)
}

// setMember adds or removes member in m[key], dropping empty sets, and
// reports whether anything changed.
func setMember(m map[string]map[string]struct{}, key, member string, on bool) bool {
	set := m[key]
	_, was := set[member]
	if was == on {
		return false
	}
	if on {
		if set == nil {
			set = make(map[string]struct{})
			m[key] = set
		}
		set[member] = struct{}{}
		return true
	}
	delete(set, member)
	if len(set) == 0 {
		delete(m, key)
	}
	return true
}

func hasMember(m map[string]map[string]struct{}, key, member string) bool {
	_, ok := m[key][member]
	return ok
}

// sortedMembers returns set's members sorted; never nil, so status JSON
// shows [] for an empty list.
func sortedMembers(set map[string]struct{}) []string {
	out := slices.AppendSeq(make([]string, 0, len(set)), maps.Keys(set))
	slices.Sort(out)
	return out
}

// MeshPeerAllowed reports whether peer is on role's serve allowlist.
func (p *policy) MeshPeerAllowed(role, peer string) bool {
	p.c.mu.RLock()
	defer p.c.mu.RUnlock()
	return hasMember(p.serveAllow, role, peer)
}

// ExposedRoles returns the roles exposed to the mesh, sorted.
func (p *policy) ExposedRoles() []string {
	p.c.mu.RLock()
	defer p.c.mu.RUnlock()
	return sortedMembers(p.exposed)
}

// RoleExposed reports whether role is exposed to the mesh.
func (p *policy) RoleExposed(role string) bool {
	p.c.mu.RLock()
	defer p.c.mu.RUnlock()
	_, ok := p.exposed[role]
	return ok
}

// PeerListedAny reports whether peer is on any role's serve allowlist: the
// mesh sends advertisements only to such peers.
func (p *policy) PeerListedAny(peer string) bool {
	p.c.mu.RLock()
	defer p.c.mu.RUnlock()
	for _, set := range p.serveAllow {
		if _, ok := set[peer]; ok {
			return true
		}
	}
	return false
}

// ApplyPolicy makes every role's exposure and both allowlists exactly want:
// roles absent from want end up neither exposed nor allowed anywhere. It is
// applied atomically (no reader sees half a policy) and each individual
// change is audited exactly as ExposeToMesh, AllowMeshPeer and
// AllowRemoteNode would audit it, in a deterministic order: roles sorted,
// and within a role exposure, then serve_to, then use_from, nodes sorted.
// An unchanged policy records nothing and bumps nothing.
func (p *policy) ApplyPolicy(want map[string]RolePolicy) {
	var e effects
	p.c.mu.Lock()
	roles := make(map[string]struct{}, len(want))
	for r := range want {
		roles[r] = struct{}{}
	}
	for r := range p.exposed {
		roles[r] = struct{}{}
	}
	for r := range p.allow {
		roles[r] = struct{}{}
	}
	for r := range p.serveAllow {
		roles[r] = struct{}{}
	}
	for _, role := range slices.Sorted(maps.Keys(roles)) {
		rp := want[role]
		p.setExposed(&e, role, rp.Expose)
		for _, d := range diffSet(p.serveAllow[role], rp.ServeTo) {
			p.setAllowMeshPeer(&e, role, d.node, d.on)
		}
		for _, d := range diffSet(p.allow[role], rp.UseFrom) {
			p.setAllowRemote(&e, role, d.node, d.on)
		}
	}
	p.c.mu.Unlock()
	p.c.finish(e)
}

// CheckPolicy reports every problem of a policy ApplyPolicy would take
// without complaint but that could never resolve: a role that is not
// a grammar.ValidName (RegisterLocal refuses it) and an empty node id. Roles are
// reported in sorted order.
func CheckPolicy(p map[string]RolePolicy) error {
	var errs []error
	for _, role := range slices.Sorted(maps.Keys(p)) {
		if !grammar.ValidName(role) {
			errs = append(errs, fmt.Errorf("role %q: %w: %s", role, ErrBadRole, grammar.NameSyntax))
		}
		rp := p[role]
		if slices.Contains(rp.ServeTo, "") || slices.Contains(rp.UseFrom, "") {
			errs = append(errs, fmt.Errorf("role %q: empty node id in an allowlist", role))
		}
	}
	return errors.Join(errs...)
}

type setChange struct {
	node string
	on   bool
}

// diffSet returns the changes that turn have into want, sorted by node.
func diffSet(have map[string]struct{}, want []string) []setChange {
	wantSet := make(map[string]struct{}, len(want))
	for _, n := range want {
		wantSet[n] = struct{}{}
	}
	var out []setChange
	for n := range have {
		if _, ok := wantSet[n]; !ok {
			out = append(out, setChange{n, false})
		}
	}
	for n := range wantSet {
		if _, ok := have[n]; !ok {
			out = append(out, setChange{n, true})
		}
	}
	slices.SortFunc(out, func(a, b setChange) int {
		switch {
		case a.node < b.node:
			return -1
		case a.node > b.node:
			return 1
		}
		return 0
	})
	return out
}
