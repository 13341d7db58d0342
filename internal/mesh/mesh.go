package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/reload"
	"github.com/nodeld/nodeld/internal/table"
)

// AdvertTable is the placement table as the mesh uses it: the source of
// this node's advertisements together with the serving policy that
// filters them per peer. *table.Table implements it. Every method is
// required, so that a table (or a fake) cannot leave the serving policy
// out and with it default deny: the mesh sends a role's advertisement
// only to a peer for which MeshPeerAllowed holds. What the mesh learns
// from its peers goes the other way, as events (Deps.PeerEvents).
type AdvertTable interface {
	// Advertisements are this node's infer advertisements, before the
	// serving policy.
	Advertisements(now time.Time) []table.Advertisement
	// MeshPeerAllowed reports whether role may be served (and so
	// advertised) to peer, a node id or a configured peer name. It must
	// deny what no policy allows.
	MeshPeerAllowed(role, peer string) bool
	// Subscribe wakes the advert loop on every change of this node's
	// advertisements.
	Subscribe() (<-chan struct{}, func())
}

// Auditor records an audit event. The chain implements it.
type Auditor interface {
	Record(source, kind string, payload any) error
}

// Recorder chains events that a remote party can trigger, counting the
// repeats of a key instead of chaining each (*chain.Recorder).
type Recorder interface {
	Record(key chain.RecordKey, source string, payload any) (chained bool, err error)
}

var _ Recorder = (*chain.Recorder)(nil)

var _ AdvertTable = (*table.Table)(nil)

// Deps are the mesh's collaborators.
type Deps struct {
	// Identity is this node's key; required.
	Identity *identity.Identity
	// DataDir holds KnownPeersFile; required.
	DataDir string
	// Table provides this node's advertisements with its serving policy;
	// required (New refuses nil).
	Table AdvertTable
	// PeerEvents receives what happens to the links to peers, in order:
	// links up and lost, the advertisement rounds they carry, the end of a
	// restart wait, peers removed (table.PeerEvent). It is the one path by
	// which the mesh's view of its peers reaches the routes, and decides
	// what they become (the daemon wires table.ApplyPeerEvent); required
	// (New refuses nil). It is called on one goroutine the mesh owns, one
	// event at a time, never under the mesh's locks and never from a
	// caller of OpenStream; it must not block for long (a round's
	// acknowledgement waits for it).
	PeerEvents func(table.PeerEvent)
	// Audit records pins (source AuditSource); nil disables.
	Audit Auditor
	// Recorder records refused handshakes (source AuditSource, kind
	// KindPeerRefused), keyed by the remote IP (inbound) or the configured
	// address (outbound) and the refusal reason: anyone who can reach the
	// listener can make handshakes fail. Nil means they are only counted
	// and logged.
	Recorder Recorder
	// Logger; nil logs nothing.
	Logger *zap.Logger
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock for pins and advertisement stamps; nil means
	// time.Now.
	Now func() time.Time
	// Rand returns jitter in [0, 1); nil means math/rand/v2.
	Rand func() float64
	// ExtraAdverts, when set, adds advertisements (the workload host's) to
	// every advert frame, for every peer.
	ExtraAdverts func() []table.Advertisement
	// OnPeersChanged is called, never under the mesh's locks, when a TOFU
	// pin or a config change alters the name -> id map, so the caller can
	// re-apply allowlists that name peers.
	OnPeersChanged func()
	// OnLinkUp, when set, is called each time a link becomes its peer's
	// current link, with the verified peer. It runs on a goroutine the
	// mesh owns (Run waits for it), never under the mesh's locks, and may
	// block: ctx ends when that link stops being the peer's link or the
	// mesh stops.
	OnLinkUp func(ctx context.Context, peer PeerInfo)
	// OnPeerStopped, when set, is called with a peer's node id when its
	// link closed because the peer stopped (CodeShutdown) and no new link
	// to it came within the restart wait: it stopped, not restarted. A
	// link lost without a word (a crash, a network fault, a stateless
	// reset) never calls it. It runs on a goroutine the mesh owns (Run
	// waits for it), never under the mesh's locks, and must not block.
	OnPeerStopped func(peer string)
	// RestartLinkWait, when positive, replaces RestartLinkWait: how long
	// a peer that restarted is waited for (its routes kept, streams to it
	// held). Tests shorten it.
	RestartLinkWait time.Duration
	// ListenUDP, when set, binds the mesh's socket instead of
	// net.ListenUDP; Run closes the socket when it returns. Tests use it
	// to keep the socket and close it under a running mesh, as a node
	// killed with SIGKILL does.
	ListenUDP func(addr *net.UDPAddr) (*net.UDPConn, error)
}

// AuditSource is the source of the mesh's audit records.
const AuditSource = "mesh"

// Audit record kinds.
const (
	// KindPeerRefused: a handshake was refused (RefusedEvent).
	KindPeerRefused = "mesh.peer.refused"
	// KindPeerRefusalsSuppressed: the count of refusals of one key that
	// the Recorder did not chain one by one (chain.SuppressedEvent).
	KindPeerRefusalsSuppressed = KindPeerRefused + chain.SuppressedSuffix
	// KindPeerPinned: a key was pinned on first use (PinnedEvent).
	KindPeerPinned = "mesh.peer.pinned"
)

// RefusedEvent is the payload of KindPeerRefused.
type RefusedEvent struct {
	Key       string `json:"key,omitempty"`
	Addr      string `json:"addr"`
	Direction string `json:"direction"` // inbound | outbound
	Reason    string `json:"reason"`    // one of the Refusal* reasons
}

// Reasons a handshake is refused (RefusedEvent.Reason), a fixed set so
// that the Recorder counts the repeats of one together.
const (
	RefusalBadCertificate = "bad certificate"
	RefusalOwnKey         = "own key"
	RefusalNotAdmitted    = "key not admitted"
	RefusalKeyDiffers     = "key differs from the key pinned for this address"
	RefusalPeerRemoved    = "peer removed"
	RefusalPinnedElse     = "key is pinned for another peer"
)

// PinnedEvent is the payload of KindPeerPinned.
type PinnedEvent struct {
	Addr string `json:"addr"`
	Key  string `json:"key"`
	ID   string `json:"id"`
}

// Where a peer's key came from.
const (
	PinnedFromConfig = "config"
	PinnedFromTOFU   = "tofu"
)

// PeerInfo describes the verified peer of a link.
type PeerInfo struct {
	ID, Name, Tier string
	Key            ed25519.PublicKey
	Addr           net.Addr
}

// Handler serves one incoming stream of a kind. The kind byte is already
// consumed; the handler owns the stream and must end it (Close, CloseWrite
// or Reset). ctx ends when the link closes or the mesh stops.
type Handler func(ctx context.Context, peer PeerInfo, s *Stream)

// Mesh is the node's QUIC mesh. It holds the configured peers (peerSet,
// whose lock its parts share) and composes the parts that each do one
// job: admission, the link set, liveness, the stream server, the
// advertiser and the event queue. See the package documentation.
type Mesh struct {
	peerSet

	ident     *identity.Identity
	log       *zap.Logger
	met       *metrics
	onPeers   func()
	listenUDP func(addr *net.UDPAddr) (*net.UDPConn, error)
	ready     chan struct{}
	changed   chan struct{} // size 1: OnPeersChanged is due

	adm     *admission
	links   *links
	streams *streamServer
	adverts *advertiser
	events  *eventQueue
}

// New validates cfg and deps and loads the TOFU pins. It binds nothing.
func New(cfg Config, deps Deps) (*Mesh, error) {
	if deps.Identity == nil {
		return nil, errors.New("mesh: no identity")
	}
	if deps.Table == nil {
		return nil, errors.New("mesh: no table")
	}
	if deps.PeerEvents == nil {
		return nil, errors.New("mesh: no consumer of peer events")
	}
	if deps.DataDir == "" {
		return nil, errors.New("mesh: no data directory")
	}
	if err := cfg.Validate(deps.Identity.PublicKey()); err != nil {
		return nil, fmt.Errorf("mesh config: %w", err)
	}
	log := deps.Logger
	if log == nil {
		log = zap.NewNop()
	}
	restartWait := deps.RestartLinkWait
	if restartWait <= 0 {
		restartWait = RestartLinkWait
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	rnd := deps.Rand
	if rnd == nil {
		rnd = rand.Float64
	}
	adm := &admission{
		ident: deps.Identity, knownPath: filepath.Join(deps.DataDir, KnownPeersFile),
		audit: deps.Audit, rec: deps.Recorder, log: log, now: now,
	}
	pins, err := loadKnownPeers(adm.knownPath)
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	adm.pins = pins
	if dropped := adm.dropSupersededPinsLocked(cfg); len(dropped) > 0 {
		if err := writeKnownPeers(adm.knownPath, adm.pins); err != nil {
			return nil, fmt.Errorf("mesh: drop first-use pins superseded by configured keys: %w", err)
		}
		log.Info("dropped first-use pins superseded by configured keys", zap.Strings("addrs", dropped))
	}
	if adm.cert, err = deps.Identity.TLSCertificate(now()); err != nil {
		return nil, fmt.Errorf("mesh certificate: %w", err)
	}
	met, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	m := &Mesh{
		peerSet: peerSet{
			gauge:     met.peers,
			cfg:       cfg,
			peers:     make(map[string]*peerEntry),
			linkEvent: make(chan struct{}),
		},
		ident:     deps.Identity,
		log:       log,
		met:       met,
		onPeers:   deps.OnPeersChanged,
		listenUDP: deps.ListenUDP,
		ready:     make(chan struct{}),
		changed:   make(chan struct{}, 1),
		adm:       adm,
		events:    newEventQueue(deps.PeerEvents, deps.OnPeerStopped),
	}
	ps := &m.peerSet
	adm.ps, adm.met, adm.pinned = ps, met, m.signalPeersChanged
	m.adverts = &advertiser{
		ps: ps, events: m.events, tbl: deps.Table, extra: deps.ExtraAdverts, now: now,
		restartWait: restartWait, log: log, met: met,
	}
	m.streams = newStreamServer(ps, m.adverts, met)
	m.links = &links{
		ps: ps, adm: adm, streams: m.streams, adv: m.adverts, live: liveness{log: log, met: met},
		events: m.events, ident: deps.Identity, met: met, log: log, now: now, rand: rnd,
		restartWait: restartWait, onLinkUp: deps.OnLinkUp,
	}
	for _, pc := range cfg.Peers {
		m.peers[pc.Addr] = adm.newPeerLocked(pc)
	}
	m.reindexLocked()
	m.updateGaugeLocked()
	return m, nil
}

// Ready is closed once the UDP socket is bound.
func (m *Mesh) Ready() <-chan struct{} { return m.ready }

// Addr is the bound UDP address; nil before Ready.
func (m *Mesh) Addr() net.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// Handle registers the handler of a stream kind, replacing any earlier
// one. It panics for KindAdvert (the mesh's own), an unknown kind or a nil
// handler: those are wiring bugs.
func (m *Mesh) Handle(kind StreamKind, h Handler) {
	m.streams.handle(kind, h)
}

func (m *Mesh) statelessResetKey() *quic.StatelessResetKey {
	// Derived from the node key so that after a restart this node resets
	// the links a peer still holds to its previous run at once.
	h := sha256.New()
	h.Write([]byte("nodeld mesh stateless reset v1\x00"))
	h.Write(m.ident.PrivateKey().Seed())
	var k quic.StatelessResetKey
	copy(k[:], h.Sum(nil))
	return &k
}

// Run binds the socket, accepts and dials links and exchanges
// advertisements until ctx ends. It then closes every link and returns nil
// once every goroutine it started has returned.
func (m *Mesh) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("mesh: Run called twice")
	}
	m.running = true
	listen := m.cfg.Listen
	qconf := m.quicConfigLocked()
	m.mu.Unlock()

	laddr, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		return fmt.Errorf("mesh listen %q: %w", listen, err)
	}
	listenUDP := m.listenUDP
	if listenUDP == nil {
		listenUDP = func(addr *net.UDPAddr) (*net.UDPConn, error) { return net.ListenUDP("udp", addr) }
	}
	uc, err := listenUDP(laddr)
	if err != nil {
		return fmt.Errorf("mesh listen %q: %w", listen, err)
	}
	tr := &quic.Transport{
		Conn:              uc,
		StatelessResetKey: m.statelessResetKey(),
	}
	ln, err := tr.Listen(m.adm.serverTLS(), qconf)
	if err != nil {
		_ = tr.Close()
		_ = uc.Close()
		return fmt.Errorf("mesh listen %q: %w", listen, err)
	}
	// runCtx ends only after the links are closed below, not with ctx:
	// a link's serveLink retiring it at ctx's end would leave nothing
	// here to close, and the peer would learn of the stop from its
	// liveness timeout instead of the CodeShutdown close.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()

	m.mu.Lock()
	m.tr = tr
	m.addr = uc.LocalAddr()
	m.runCtx = runCtx
	for _, p := range m.peers {
		m.links.startDialLocked(p)
	}
	m.wg.Go(func() { m.links.acceptLoop(runCtx, ln) })
	m.wg.Go(func() { m.adverts.loop(runCtx) })
	m.wg.Go(func() { m.notifyLoop(runCtx) })
	m.wg.Go(func() { m.events.loop(runCtx) })
	m.mu.Unlock()
	close(m.ready)
	m.log.Info("mesh listening", zap.Stringer("addr", uc.LocalAddr()), zap.String("node", m.ident.ID()))

	<-ctx.Done()

	m.mu.Lock()
	m.closing = true
	m.linkChangedLocked()
	var links []*link
	for _, p := range m.peers {
		if p.link != nil {
			links = append(links, p.link)
		}
	}
	m.mu.Unlock()
	for _, l := range links {
		_ = l.conn.CloseWithError(CodeShutdown, "shutdown")
	}
	_ = ln.Close()
	cancel()
	_ = tr.Close()
	m.wg.Wait()
	_ = uc.Close()
	m.mu.Lock()
	m.runCtx = nil
	m.mu.Unlock()
	// The losses of the links just closed, after the event loop ended.
	m.events.deliver()
	return nil
}

func (m *Mesh) notifyLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.changed:
			if m.onPeers != nil {
				m.onPeers()
			}
		}
	}
}

func (m *Mesh) signalPeersChanged() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// ApplyConfig applies a new peer list, keep-alive and advert interval:
// Prepare, then its commit. A removed peer, or one whose configured key
// changed, loses its link and its advertisements at once. A new listen
// address is refused (ErrListenChanged). Keep-alive changes apply to new
// links.
func (m *Mesh) ApplyConfig(cfg Config) error {
	p, err := m.Prepare(cfg)
	if err != nil {
		return err
	}
	p.Commit()
	return nil
}

// Prepare checks cfg against this mesh (Validate with this node's key, and
// an unchanged listen address) and returns the change that applies it as
// ApplyConfig does (the reload contract, internal/reload). Prepare changes
// nothing; the commit cannot fail. Only one reload may be between Prepare
// and commit at a time.
func (m *Mesh) Prepare(cfg Config) (reload.Prepared, error) {
	if err := cfg.Validate(m.ident.PublicKey()); err != nil {
		return nil, fmt.Errorf("mesh config: %w", err)
	}
	m.mu.Lock()
	listen := m.cfg.Listen
	m.mu.Unlock()
	if cfg.Listen != listen {
		return nil, fmt.Errorf("mesh listen %q -> %q: %w", listen, cfg.Listen, ErrListenChanged)
	}
	cfg.Peers = slices.Clone(cfg.Peers)
	return reload.Commit(func() { m.applyConfig(cfg) }), nil
}

// applyConfig puts a prepared config in force.
func (m *Mesh) applyConfig(cfg Config) {
	want := make(map[string]PeerConfig, len(cfg.Peers))
	for _, pc := range cfg.Peers {
		want[pc.Addr] = pc
	}
	// admission.pinMu before mu: a configured key that supersedes a
	// first-use pin drops the pin from known_peers.json in this same step.
	m.adm.pinMu.Lock()
	defer m.adm.pinMu.Unlock()
	m.mu.Lock()
	if dropped := m.adm.dropSupersededPinsLocked(cfg); len(dropped) > 0 {
		// The commit cannot fail: the pins are dropped in memory at once
		// and a failed write is logged. New drops the same pins again at
		// the next start, while the configured key is still there.
		snapshot := maps.Clone(m.adm.pins)
		m.mu.Unlock()
		if err := writeKnownPeers(m.adm.knownPath, snapshot); err != nil {
			m.log.Error("known peers not written; superseded first-use pins dropped in memory only", zap.Strings("addrs", dropped), zap.Error(err))
		} else {
			m.log.Info("dropped first-use pins superseded by configured keys", zap.Strings("addrs", dropped))
		}
		m.mu.Lock()
	}
	before := m.nameIDsLocked()
	var closing []*link
	for addr, p := range m.peers {
		pc, ok := want[addr]
		if ok && sameKeyConfig(pc.Key, p.cfg.Key) {
			p.cfg = pc
			continue
		}
		if p.stop != nil {
			p.stop()
		}
		if p.link != nil {
			close(p.link.done)
			closing = append(closing, p.link)
			p.link = nil
			m.linkChangedLocked()
		}
		if p.id != "" {
			m.events.emit(queuedEvent{ev: table.PeerEvent{Kind: table.PeerRemoved, Node: p.id}})
		}
		delete(m.peers, addr)
	}
	for _, pc := range cfg.Peers {
		if _, ok := m.peers[pc.Addr]; !ok {
			p := m.adm.newPeerLocked(pc)
			m.peers[pc.Addr] = p
			m.links.startDialLocked(p)
		}
	}
	m.cfg = cfg
	m.reindexLocked()
	after := m.nameIDsLocked()
	m.updateGaugeLocked()
	idle := m.runCtx == nil
	m.mu.Unlock()

	for _, l := range closing {
		_ = l.conn.CloseWithError(CodeRemoved, "peer removed")
	}
	if idle {
		// No event loop runs (before Run, or after it returned).
		m.events.deliver()
	}
	if !maps.Equal(before, after) && m.onPeers != nil {
		m.onPeers()
	}
}

func sameKeyConfig(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	ka, err1 := identity.ParsePublicKeyHex(a)
	kb, err2 := identity.ParsePublicKeyHex(b)
	return err1 == nil && err2 == nil && ka.Equal(kb)
}

// IsAdmitted reports whether nodeID is a configured peer whose key is
// pinned (in config or on first use). It implements table.Admission.
func (m *Mesh) IsAdmitted(nodeID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peerByIDLocked(nodeID) != nil
}

var _ table.Admission = (*Mesh)(nil)

// ResolveRef maps a configured peer's name, or a node id, to the node id,
// when that peer's key is known.
func (m *Mesh) ResolveRef(ref string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.peerByIDLocked(ref); p != nil {
		return p.id, true
	}
	for _, p := range m.peers {
		if ref != "" && p.cfg.Name == ref && p.id != "" {
			return p.id, true
		}
	}
	return "", false
}

// Peer describes an admitted peer by node id.
func (m *Mesh) Peer(nodeID string) (PeerInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peerByIDLocked(nodeID)
	if p == nil {
		return PeerInfo{}, false
	}
	return m.peerInfoLocked(p), true
}

// LinkedPeers describes every peer with a live link, in configuration
// order.
func (m *Mesh) LinkedPeers() []PeerInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []PeerInfo
	for _, pc := range m.cfg.Peers {
		if p := m.peers[pc.Addr]; p != nil && p.link != nil {
			out = append(out, m.peerInfoLocked(p))
		}
	}
	return out
}

// LinkedPeer describes the peer nodeID only while it has a live link:
// Addr is then the link's remote address, the peer's mesh socket (a node
// dials and listens on one socket), where a transport beside QUIC reaches
// it too. Asked for every request, it hands out the peer's Key itself, not
// a copy: the caller may keep it, and must never modify it.
func (m *Mesh) LinkedPeer(nodeID string) (PeerInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peerByIDLocked(nodeID)
	if p == nil || p.link == nil {
		return PeerInfo{}, false
	}
	return m.sharedPeerInfoLocked(p), true
}

// LinkedPeerByKey describes the configured peer whose pinned key is key,
// only while it has a live link: how a transport beside QUIC admits a
// connection by the key its handshake verified (default deny: a key not
// pinned, this node's own, or a peer without a link is refused). As
// LinkedPeer, it hands out the peer's Key itself: never modify it.
func (m *Mesh) LinkedPeerByKey(key ed25519.PublicKey) (PeerInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(key) != ed25519.PublicKeySize || key.Equal(m.ident.PublicKey()) {
		return PeerInfo{}, false
	}
	p := m.peerByKeyLocked(key)
	if p == nil || p.link == nil || p.id == "" {
		return PeerInfo{}, false
	}
	return m.sharedPeerInfoLocked(p), true
}

// OpenStream opens a stream of kind on the existing link to nodeID (see
// links.open). It never dials: without a live link it returns ErrNoLink,
// except that a peer that restarted (or, for an inference stream, closed
// its link stopping) less than RestartLinkWait ago is waited for, within
// ctx. It changes no route: a link found ended is reported lost
// (PeerLinkLost). An inference stream is never sent again by the mesh
// (PeerRestarted tells its caller when it may). The caller owns the
// stream and must end it (Close, CloseWrite or Reset).
func (m *Mesh) OpenStream(ctx context.Context, nodeID string, kind StreamKind) (*Stream, error) {
	return m.links.open(ctx, nodeID, kind)
}
