package table

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// ServicePrefix prefixes the advertised service name: role "chat" is
// advertised as "infer.chat".
const ServicePrefix = "infer."

// AuditSource is the source every audit record of the table carries.
const AuditSource = "table"

// Admission tells whether a peer currently qualifies to serve inference to
// this node (an enforced, trusted, full node). The mesh implements it. It is
// consulted on every ingest and every resolution, never cached, and never
// called while the table's lock is held.
type Admission interface {
	IsAdmitted(nodeID string) bool
}

// Auditor records an audit event. The chain implements it. The table calls
// it after a change has been applied, never while holding its lock.
type Auditor interface {
	Record(source, kind string, payload any) error
}

// Options configures a Table. The zero value is a table without mesh,
// audit or metrics, using the real clock and DefaultAdvertTTL.
type Options struct {
	// Admission says which peers may serve this node. Nil means there is
	// no mesh: every advertisement is refused and only local instances
	// resolve.
	Admission Admission
	// Audit receives the table's audit events (source AuditSource). Nil
	// disables audit.
	Audit Auditor
	// RecordRefusal receives every refused advertisement: sender is the
	// verified sender, kind KindAdvertRefused, reason one of the Reason*
	// constants and payload an AdvertRefusedEvent. A peer decides how
	// often it advertises, so the daemon passes its shared rate-limited
	// recorder here (chain.Recorder, keyed by sender, kind and reason),
	// never Audit itself. Its errors are counted and reported like
	// Audit's. Nil means refusals are not recorded.
	RecordRefusal func(sender, kind, reason string, payload any) error
	// AuditError, when set, is told about every audit record (or refusal
	// record) that could not be written. The change it describes has
	// already been applied: the table's audit is after the fact, never a
	// gate.
	AuditError func(kind string, err error)
	// AdvertTTL is how long a received advertisement counts after its
	// local receipt. Zero or negative means DefaultAdvertTTL.
	AdvertTTL time.Duration
	// Now is the clock for advertisement freshness and snapshots. Nil
	// means time.Now.
	Now func() time.Time
	// Load returns the current load of this node's proxy for role, for the
	// "load" metadata of outgoing advertisements. It is called without the
	// table's lock held. Nil advertises load "0".
	Load func(role string) (inflight, capacity int)
}

// MeshLocal is a local instance a peer's forwarded request may reach.
type MeshLocal struct {
	// Base is the verified loopback base URL, without trailing slash.
	Base string
	// Model is the model the server knows the instance by; a peer's
	// requests are pinned to it. Empty when unknown.
	Model string
	// Runtime names the server software ("llama.cpp", "ollama", ...).
	Runtime string
}

type localEntry struct {
	base    string
	model   string
	api     string
	runtime string
}

type remoteEntry struct {
	ad Advertisement
	// received is when this node took the advertisement. The peer's own
	// LastUpdated is never used for freshness.
	received time.Time
}

// Table maps roles to the instance that serves them: a local loopback
// server or an admitted, allowlisted peer. See the package documentation
// for its rules.
type Table struct {
	nodeID  string
	admit   Admission
	audit   Auditor
	refusal func(sender, kind, reason string, payload any) error
	auditFn func(kind string, err error)
	ttl     time.Duration
	now     func() time.Time
	load    func(role string) (int, int)
	metrics *metrics

	// mu guards every field below it: local, remote, hosts, allow,
	// serveAllow, exposed, proxyPorts, linking and gen, and the state of this table's
	// LocalSlots. It is never held while calling the Auditor, the
	// Admission, Options.Load or while waking subscribers.
	mu sync.RWMutex
	// local: role -> its registrations of an instance on this host, in
	// registration order, never empty; the elected one serves (local.go).
	local map[string][]*LocalSlot
	// remote: role -> sender node id -> its latest advertisement.
	remote map[string]map[string]remoteEntry
	// hosts: sender node id -> its latest workload-host advertisement;
	// one per admitted sender, dropped by RemoveNode.
	hosts map[string]remoteEntry
	// allow (use_from, consumer side): role -> nodes that may serve this
	// node. Default deny.
	allow map[string]map[string]struct{}
	// serveAllow (serve_to, serving side): role -> peers this node serves.
	// Default deny.
	serveAllow map[string]map[string]struct{}
	// exposed: roles whose local instance may serve mesh peers at all.
	exposed map[string]struct{}
	// proxyPorts: role -> port of this node's loopback proxy listener.
	proxyPorts map[string]uint16
	// linking: node id -> until when its routes are kept waiting for
	// its link after it restarted (KeepForRestart); nil until first used.
	linking map[string]time.Time
	// gen counts resolution-relevant changes.
	gen uint64

	// subMu guards subs and nextSub. It is never held together with mu.
	subMu   sync.Mutex
	subs    map[uint64]chan struct{}
	nextSub uint64
}

// New returns an empty table for node nodeID. It starts nothing and
// registers no metrics (Register does).
func New(nodeID string, opts Options) *Table {
	t := &Table{
		nodeID:     nodeID,
		admit:      opts.Admission,
		audit:      opts.Audit,
		refusal:    opts.RecordRefusal,
		auditFn:    opts.AuditError,
		ttl:        opts.AdvertTTL,
		now:        opts.Now,
		load:       opts.Load,
		local:      make(map[string][]*LocalSlot),
		remote:     make(map[string]map[string]remoteEntry),
		hosts:      make(map[string]remoteEntry),
		allow:      make(map[string]map[string]struct{}),
		serveAllow: make(map[string]map[string]struct{}),
		exposed:    make(map[string]struct{}),
		proxyPorts: make(map[string]uint16),
		subs:       make(map[uint64]chan struct{}),
	}
	if t.ttl <= 0 {
		t.ttl = DefaultAdvertTTL
	}
	if t.now == nil {
		t.now = time.Now
	}
	t.metrics = newMetrics(t.Generation)
	return t
}

// NodeID returns this node's id.
func (t *Table) NodeID() string { return t.nodeID }

// Generation returns the number of resolution-relevant changes so far. A
// cache of Resolve or BaseURLForRole keyed on it is never stale.
func (t *Table) Generation() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.gen
}

// effects collects what a mutation must do once the lock is released.
type effects struct {
	events []auditEvent
	notify bool
}

type auditEvent struct {
	kind    string
	payload any
}

// bump records a resolution-relevant change. Call with mu held for writing.
func (t *Table) bump(e *effects) {
	t.gen++
	e.notify = true
}

// finish emits the audit events and wakes subscribers. Call without mu.
func (t *Table) finish(e effects) {
	for _, ev := range e.events {
		t.record(ev.kind, ev.payload)
	}
	if e.notify {
		t.notifyAll()
	}
}

func (t *Table) record(kind string, payload any) {
	if t.audit == nil {
		return
	}
	if err := t.audit.Record(AuditSource, kind, payload); err != nil {
		t.auditFailed(kind, err)
	}
}

// recordRefusal hands a refused advertisement to Options.RecordRefusal.
// Call without mu.
func (t *Table) recordRefusal(sender, reason string, ev AdvertRefusedEvent) {
	if t.refusal == nil {
		return
	}
	if err := t.refusal(sender, KindAdvertRefused, reason, ev); err != nil {
		t.auditFailed(KindAdvertRefused, err)
	}
}

func (t *Table) auditFailed(kind string, err error) {
	t.metrics.auditFailed()
	if t.auditFn != nil {
		t.auditFn(kind, err)
	}
}

// AllowRemoteNode allows (on) or stops allowing node to serve role to this
// node: the consumer-side decision to send this node's prompts there.
// Without it no remote instance of role resolves, however it advertises.
// A change is audited (KindRemoteAllow) and bumps the generation;
// withdrawing stops resolution at once.
func (t *Table) AllowRemoteNode(role, node string, on bool) {
	var e effects
	t.mu.Lock()
	t.setAllowRemote(&e, role, node, on)
	t.mu.Unlock()
	t.finish(e)
}

func (t *Table) setAllowRemote(e *effects, role, node string, on bool) {
	if !setMember(t.allow, role, node, on) {
		return
	}
	e.events = append(e.events, auditEvent{KindRemoteAllow, RemoteAllowEvent{
		Role: role, Node: node, Allowed: on, Consumer: t.nodeID,
	}})
	t.bump(e)
}

// AllowMeshPeer allows (on) or stops allowing peer to use this node's
// instance of role: the serving-side counterpart of AllowRemoteNode.
// ExposeToMesh says the role may leave loopback at all; this says to whom.
// A change is audited (KindMeshAllow) and wakes subscribers (so the mesh
// can advertise to a newly listed peer) but, as in the original, does not
// bump the generation: no resolution depends on it.
func (t *Table) AllowMeshPeer(role, peer string, on bool) {
	var e effects
	t.mu.Lock()
	t.setAllowMeshPeer(&e, role, peer, on)
	t.mu.Unlock()
	t.finish(e)
}

func (t *Table) setAllowMeshPeer(e *effects, role, peer string, on bool) {
	if !setMember(t.serveAllow, role, peer, on) {
		return
	}
	e.events = append(e.events, auditEvent{KindMeshAllow, MeshAllowEvent{
		Role: role, Peer: peer, Allowed: on, Server: t.nodeID,
	}})
	e.notify = true
}

// ExposeToMesh allows (on) or stops serving role to mesh peers at all.
// Unexposed roles are neither advertised nor served. A change is audited
// (KindMeshExpose) and bumps the generation.
func (t *Table) ExposeToMesh(role string, on bool) {
	var e effects
	t.mu.Lock()
	t.setExposed(&e, role, on)
	t.mu.Unlock()
	t.finish(e)
}

func (t *Table) setExposed(e *effects, role string, on bool) {
	_, was := t.exposed[role]
	if was == on {
		return
	}
	if on {
		t.exposed[role] = struct{}{}
	} else {
		delete(t.exposed, role)
	}
	e.events = append(e.events, auditEvent{KindMeshExpose, ExposeEvent{
		Role: role, NodeID: t.nodeID, Exposed: on,
	}})
	t.bump(e)
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

// SetProxyPort records the port of this node's loopback proxy listener for
// role, which BaseURLForRole hands out for remote targets. As in the
// original it does not bump the generation; a change wakes subscribers.
func (t *Table) SetProxyPort(role string, port uint16) {
	var e effects
	t.mu.Lock()
	if old, ok := t.proxyPorts[role]; !ok || old != port {
		t.proxyPorts[role] = port
		e.notify = true
	}
	t.mu.Unlock()
	t.finish(e)
}

// ProxyPort returns the loopback proxy port registered for role.
func (t *Table) ProxyPort(role string) (uint16, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	p, ok := t.proxyPorts[role]
	return p, ok
}

// LocalForPeer returns the local instance of role that peer's forwarded
// request may reach: only when role is exposed, peer is on role's serve
// allowlist and an instance is registered locally (the elected
// registration). It never returns a remote target, so a request cannot be
// bounced from node to node.
func (t *Table) LocalForPeer(role, peer string) (MeshLocal, bool) {
	l, _, ok := t.localForPeer(role, peer, false)
	return l, ok
}

// LocalForPeerHeld is LocalForPeer that also takes a Hold of the elected
// registration, as ResolveHeld does, for the serving side of the mesh.
func (t *Table) LocalForPeerHeld(role, peer string) (MeshLocal, Hold, bool) {
	return t.localForPeer(role, peer, true)
}

func (t *Table) localForPeer(role, peer string, hold bool) (MeshLocal, Hold, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if _, ok := t.exposed[role]; !ok || !hasMember(t.serveAllow, role, peer) {
		return MeshLocal{}, Hold{}, false
	}
	s := t.electedLocked(role)
	if s == nil {
		return MeshLocal{}, Hold{}, false
	}
	var h Hold
	if hold {
		h = s.holdLocked()
	}
	return MeshLocal{Base: s.entry.base, Model: s.entry.model, Runtime: s.entry.runtime}, h, true
}

// MeshPeerAllowed reports whether peer is on role's serve allowlist.
func (t *Table) MeshPeerAllowed(role, peer string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return hasMember(t.serveAllow, role, peer)
}

// ExposedRoles returns the roles exposed to the mesh, sorted.
func (t *Table) ExposedRoles() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return sortedMembers(t.exposed)
}

// PeerListedAny reports whether peer is on any role's serve allowlist: the
// mesh sends advertisements only to such peers.
func (t *Table) PeerListedAny(peer string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, set := range t.serveAllow {
		if _, ok := set[peer]; ok {
			return true
		}
	}
	return false
}
