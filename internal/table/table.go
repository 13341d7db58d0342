package table

import "time"

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
	// cand is what resolution reads of ad, parsed once when it arrived
	// rather than at every request (its waiting flag is set per call).
	cand candidate
	// received is when this node took the advertisement. The peer's own
	// LastUpdated is never used for freshness.
	received time.Time
}

// Table maps roles to the instance that serves them: a local loopback
// server or an admitted, allowlisted peer. See the package documentation
// for its rules.
//
// It is made of parts with one job each, sharing core's lock and
// generation: locals (this node's registrations and their election),
// adverts (what peers advertised and how long their routes wait for a
// link), policy (exposure and both allowlists). Table itself resolves (the
// request path), builds this node's advertisements, applies the mesh's
// peer events and copies the whole for status: what needs more than one
// part. The parts' methods are Table's, promoted.
type Table struct {
	core
	locals
	adverts
	policy
	standbys

	// load is Options.Load, for the "load" of this node's advertisements.
	load func(role string) (int, int)
	// proxyPorts: role -> port of this node's loopback proxy listener.
	// Guarded by mu.
	proxyPorts map[string]uint16
}

// New returns an empty table for node nodeID. It starts nothing and
// registers no metrics (Register does).
func New(nodeID string, opts Options) *Table {
	t := &Table{
		core: core{
			nodeID:  nodeID,
			admit:   opts.Admission,
			audit:   opts.Audit,
			refusal: opts.RecordRefusal,
			auditFn: opts.AuditError,
			ttl:     opts.AdvertTTL,
			now:     opts.Now,
			subs:    make(map[uint64]chan struct{}),
		},
		load:       opts.Load,
		proxyPorts: make(map[string]uint16),
	}
	if t.ttl <= 0 {
		t.ttl = DefaultAdvertTTL
	}
	if t.now == nil {
		t.now, t.epoch = time.Now, time.Now()
	}
	t.metrics = newMetrics(t.Generation)
	t.locals = newLocals(&t.core)
	t.adverts = newAdverts(&t.core)
	t.policy = newPolicy(&t.core)
	t.standbys = standbys{c: &t.core}
	return t
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

// AdmitFunc is a function as an Admission (the daemon's: the mesh's
// IsAdmitted once the mesh is built, which is after the table).
type AdmitFunc func(nodeID string) bool

// IsAdmitted calls f.
func (f AdmitFunc) IsAdmitted(nodeID string) bool { return f(nodeID) }
