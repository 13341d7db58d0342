package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
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

type peerEntry struct {
	cfg    PeerConfig
	cfgKey ed25519.PublicKey // from config; nil for TOFU
	ap     netip.AddrPort    // resolved address; invalid until known

	key  ed25519.PublicKey // effective pinned key; nil until known
	id   string
	from string // PinnedFromConfig | PinnedFromTOFU | ""

	state      string
	lastErr    string
	refusedKey string // hex of a different key seen at ap
	link       *link
	stop       context.CancelFunc // the dial loop; nil when not running
	// resetAt is when the peer's last link ended with a stateless reset
	// (the peer restarted); zero once a new link is up.
	resetAt time.Time
	// awayAt is when the peer's last link ended because the peer
	// restarted (resetAt) or closed it stopping (CodeShutdown: a
	// restart, as often as not, such as an upgrade): its routes are kept
	// waiting for its next link from then for the restart wait. Zero
	// once a new link is up.
	awayAt time.Time
}

type link struct {
	conn     *quic.Conn
	cert     []byte // the certificate the peer presented (connCert)
	peer     *peerEntry
	peerID   string
	dialer   string // node id of the side that dialed
	outbound bool
	up       time.Time
	// done is closed, under Mesh.mu, when the link stops being its
	// peer's link.
	done chan struct{}
	// kick (size 1) asks the link's advert sender for a round.
	kick chan struct{}
}

func (l *link) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Mesh is the node's QUIC mesh: admission, one link per peer, stream
// dispatch and the advertisement exchange. See the package documentation.
type Mesh struct {
	ident     *identity.Identity
	knownPath string
	tbl       AdvertTable
	audit     Auditor
	rec       Recorder
	log       *zap.Logger
	met       *metrics
	now       func() time.Time
	rand      func() float64
	extra     func() []table.Advertisement
	onPeers   func()
	onLinkUp  func(ctx context.Context, peer PeerInfo)
	onStopped func(peer string)
	sink      func(table.PeerEvent)
	listenUDP func(addr *net.UDPAddr) (*net.UDPConn, error)
	// restartWait is RestartLinkWait or Deps.RestartLinkWait.
	restartWait time.Duration
	cert        tls.Certificate
	ready       chan struct{}
	changed     chan struct{} // size 1: OnPeersChanged is due

	// pinMu serialises admission decisions that may pin a key, so that
	// known_peers.json is written in pin order. It is taken before mu,
	// never while holding it, and is held across the pin file write.
	pinMu sync.Mutex

	// mu guards every field below.
	mu       sync.Mutex
	cfg      Config
	peers    map[string]*peerEntry // by configured address
	pins     map[string]knownPeer  // TOFU pins by configured address
	handlers map[StreamKind]Handler
	addr     net.Addr
	tr       *quic.Transport
	runCtx   context.Context // non-nil while Run runs
	// linkEvent is closed, and replaced, whenever a peer's link changes
	// (awaitLink waits on it).
	linkEvent chan struct{}
	running   bool
	closing   bool
	wg        sync.WaitGroup // every goroutine Run starts, directly or not

	// events are reported and not yet delivered (events.go); eventKick
	// (size 1) wakes the event loop.
	events    []queuedEvent
	eventKick chan struct{}
	// deliverMu is held while events are delivered, one delivery at a
	// time. It is taken before mu, never while holding it.
	deliverMu sync.Mutex

	// work hands an accepted stream to an idle worker (see goServe).
	work chan func()
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
	m := &Mesh{
		ident:       deps.Identity,
		knownPath:   filepath.Join(deps.DataDir, KnownPeersFile),
		tbl:         deps.Table,
		audit:       deps.Audit,
		rec:         deps.Recorder,
		log:         deps.Logger,
		now:         deps.Now,
		rand:        deps.Rand,
		extra:       deps.ExtraAdverts,
		onPeers:     deps.OnPeersChanged,
		onLinkUp:    deps.OnLinkUp,
		onStopped:   deps.OnPeerStopped,
		sink:        deps.PeerEvents,
		eventKick:   make(chan struct{}, 1),
		listenUDP:   deps.ListenUDP,
		restartWait: deps.RestartLinkWait,
		ready:       make(chan struct{}),
		changed:     make(chan struct{}, 1),
		cfg:         cfg,
		peers:       make(map[string]*peerEntry),
		handlers:    make(map[StreamKind]Handler),
		linkEvent:   make(chan struct{}),
		work:        make(chan func()),
	}
	if m.log == nil {
		m.log = zap.NewNop()
	}
	if m.restartWait <= 0 {
		m.restartWait = RestartLinkWait
	}
	if m.now == nil {
		m.now = time.Now
	}
	if m.rand == nil {
		m.rand = rand.Float64
	}
	pins, err := loadKnownPeers(m.knownPath)
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	m.pins = pins
	if dropped := m.dropSupersededPinsLocked(cfg); len(dropped) > 0 {
		if err := writeKnownPeers(m.knownPath, m.pins); err != nil {
			return nil, fmt.Errorf("mesh: drop first-use pins superseded by configured keys: %w", err)
		}
		m.log.Info("dropped first-use pins superseded by configured keys", zap.Strings("addrs", dropped))
	}
	cert, err := deps.Identity.TLSCertificate(m.now())
	if err != nil {
		return nil, fmt.Errorf("mesh certificate: %w", err)
	}
	m.cert = cert
	for _, pc := range cfg.Peers {
		m.peers[pc.Addr] = m.newPeerLocked(pc)
	}
	if m.met, err = newMetrics(deps.Registerer); err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	m.updateGaugeLocked()
	return m, nil
}

// dropSupersededPinsLocked removes the first-use pins of addresses whose
// configured peer now names a key: the operator's key supersedes the pin
// for good, so removing that key later must not bring the old pin back.
// It returns the addresses dropped, sorted; the caller persists the pins.
func (m *Mesh) dropSupersededPinsLocked(cfg Config) []string {
	var dropped []string
	for _, pc := range cfg.Peers {
		if pc.Key == "" {
			continue
		}
		if _, ok := m.pins[pc.Addr]; ok {
			delete(m.pins, pc.Addr)
			dropped = append(dropped, pc.Addr)
		}
	}
	slices.Sort(dropped)
	return dropped
}

// newPeerLocked builds a peer entry; the config was validated.
func (m *Mesh) newPeerLocked(pc PeerConfig) *peerEntry {
	p := &peerEntry{cfg: pc, state: StateConnecting}
	if pc.Key != "" {
		p.cfgKey, _ = identity.ParsePublicKeyHex(pc.Key)
		p.key, p.id, p.from = p.cfgKey, identity.NodeID(p.cfgKey), PinnedFromConfig
	} else if pin, ok := m.pins[pc.Addr]; ok {
		k, _ := identity.ParsePublicKeyHex(pin.Key)
		p.key, p.id, p.from = k, identity.NodeID(k), PinnedFromTOFU
	}
	if ap, err := netip.ParseAddrPort(pc.Addr); err == nil {
		p.ap = normAddrPort(ap)
	}
	return p
}

func normAddrPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if u, ok := a.(*net.UDPAddr); ok {
		return normAddrPort(u.AddrPort())
	}
	if a == nil {
		return netip.AddrPort{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.AddrPort{}
	}
	return normAddrPort(ap)
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
	if kind == KindAdvert || kind.String() == "unknown" || h == nil {
		panic(fmt.Sprintf("mesh: cannot register a handler for stream kind %d", kind))
	}
	m.mu.Lock()
	m.handlers[kind] = h
	m.mu.Unlock()
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

func (m *Mesh) quicConfigLocked() *quic.Config {
	ka := m.cfg.keepalive()
	return &quic.Config{
		HandshakeIdleTimeout:  HandshakeTimeout,
		MaxIdleTimeout:        ka * IdleTimeoutFactor,
		KeepAlivePeriod:       ka,
		MaxIncomingStreams:    m.cfg.maxStreams(),
		MaxIncomingUniStreams: -1,
		// Served streams' credit rides with the next answer (credits).
		RequireStreamCreditRelease: true,
		EnableDatagrams:            true, // liveness heartbeats
	}
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
	ln, err := tr.Listen(m.serverTLS(), qconf)
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
		m.startDialLocked(p)
	}
	m.wg.Go(func() { m.acceptLoop(runCtx, ln) })
	m.wg.Go(func() { m.advertLoop(runCtx) })
	m.wg.Go(func() { m.notifyLoop(runCtx) })
	m.wg.Go(func() { m.eventLoop(runCtx) })
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
	m.deliverPending()
	return nil
}

// startDialLocked starts p's dial loop while Run runs.
func (m *Mesh) startDialLocked(p *peerEntry) {
	if m.runCtx == nil || m.closing || p.stop != nil {
		return
	}
	ctx, stop := context.WithCancel(m.runCtx)
	p.stop = stop
	m.wg.Go(func() { m.dialLoop(ctx, p) })
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

// nameIDsLocked is the name -> id map (by address for unnamed peers).
func (m *Mesh) nameIDsLocked() map[string]string {
	out := make(map[string]string, len(m.peers))
	for addr, p := range m.peers {
		out[p.cfg.Name+"\x00"+addr] = p.id
	}
	return out
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
	// pinMu before mu: a configured key that supersedes a first-use pin
	// drops the pin from known_peers.json in this same step.
	m.pinMu.Lock()
	defer m.pinMu.Unlock()
	m.mu.Lock()
	if dropped := m.dropSupersededPinsLocked(cfg); len(dropped) > 0 {
		// The commit cannot fail: the pins are dropped in memory at once
		// and a failed write is logged. New drops the same pins again at
		// the next start, while the configured key is still there.
		snapshot := maps.Clone(m.pins)
		m.mu.Unlock()
		if err := writeKnownPeers(m.knownPath, snapshot); err != nil {
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
			m.emitLocked(queuedEvent{ev: table.PeerEvent{Kind: table.PeerRemoved, Node: p.id}})
		}
		delete(m.peers, addr)
	}
	for _, pc := range cfg.Peers {
		if _, ok := m.peers[pc.Addr]; !ok {
			p := m.newPeerLocked(pc)
			m.peers[pc.Addr] = p
			m.startDialLocked(p)
		}
	}
	m.cfg = cfg
	after := m.nameIDsLocked()
	m.updateGaugeLocked()
	m.mu.Unlock()

	for _, l := range closing {
		_ = l.conn.CloseWithError(CodeRemoved, "peer removed")
	}
	m.deliverIfIdle()
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

func (m *Mesh) peerByKeyLocked(key ed25519.PublicKey) *peerEntry {
	for _, p := range m.peers {
		if p.key != nil && p.key.Equal(key) {
			return p
		}
	}
	return nil
}

func (m *Mesh) peerByIDLocked(id string) *peerEntry {
	if id == "" {
		return nil
	}
	for _, p := range m.peers {
		if p.id == id {
			return p
		}
	}
	return nil
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

func (m *Mesh) peerInfoLocked(p *peerEntry) PeerInfo {
	info := PeerInfo{ID: p.id, Name: p.cfg.Name, Tier: p.cfg.Tier, Key: append(ed25519.PublicKey(nil), p.key...)}
	switch {
	case p.link != nil:
		info.Addr = p.link.conn.RemoteAddr()
	case p.ap.IsValid():
		info.Addr = net.UDPAddrFromAddrPort(p.ap)
	}
	return info
}

// linkChangedLocked wakes every awaitLink. m.mu must be held.
func (m *Mesh) linkChangedLocked() {
	close(m.linkEvent)
	m.linkEvent = make(chan struct{})
}

func (m *Mesh) updateGaugeLocked() {
	counts := make(map[string]int, len(peerStates))
	for _, p := range m.peers {
		counts[p.state]++
	}
	for _, s := range peerStates {
		m.met.peers.WithLabelValues(s).Set(float64(counts[s]))
	}
}

func (m *Mesh) setState(p *peerEntry, state, lastErr string) {
	m.mu.Lock()
	if m.peers[p.cfg.Addr] == p && p.link == nil {
		p.state = state
		p.lastErr = lastErr
		m.updateGaugeLocked()
	}
	m.mu.Unlock()
}
