package mesh

import (
	"context"
	"crypto/ed25519"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
)

// peerSet is the state every part of the mesh shares: the configured
// peers, each with its pinned key, state and current link, and the run
// they are served in. One lock guards it all, because a link change, the
// peer's state and the event that reports it happen as one step.
type peerSet struct {
	// gauge is nodeld_mesh_peers, by state.
	gauge *prometheus.GaugeVec

	// mu guards every field below and the fields of every peerEntry and
	// link. It is taken after admission.pinMu and eventQueue.deliverMu,
	// never while holding it; while holding it only eventQueue.mu and the
	// byte counter's lock are taken.
	mu    sync.Mutex
	cfg   Config
	peers map[string]*peerEntry // by configured address
	// byID and byKey index the pinned peers by node id and by key (as a
	// string): a forwarded request looks its peer up twice, and a fleet
	// has hundreds. reindexLocked rebuilds them whenever a peer is added,
	// removed or pinned.
	byID  map[string]*peerEntry
	byKey map[string]*peerEntry
	addr  net.Addr
	tr    *quic.Transport
	// runCtx is non-nil while Run runs.
	runCtx context.Context
	// linkEvent is closed, and replaced, whenever a peer's link changes
	// (links.awaitLink waits on it).
	linkEvent chan struct{}
	running   bool
	closing   bool
	wg        sync.WaitGroup // every goroutine Run starts, directly or not
}

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
	// done is closed, under peerSet.mu, when the link stops being its
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

func (ps *peerSet) peerByKeyLocked(key ed25519.PublicKey) *peerEntry {
	if len(key) == 0 {
		return nil
	}
	return ps.current(ps.byKey[string(key)])
}

func (ps *peerSet) peerByIDLocked(id string) *peerEntry {
	if id == "" {
		return nil
	}
	return ps.current(ps.byID[id])
}

// current returns p when it is still the configured peer at its address:
// an index entry left behind by a change that forgot to reindex must not
// admit a removed peer.
func (ps *peerSet) current(p *peerEntry) *peerEntry {
	if p == nil || ps.peers[p.cfg.Addr] != p {
		return nil
	}
	return p
}

// reindexLocked rebuilds byID and byKey from peers. ps.mu must be held.
func (ps *peerSet) reindexLocked() {
	if ps.byID == nil {
		ps.byID, ps.byKey = make(map[string]*peerEntry), make(map[string]*peerEntry)
	}
	clear(ps.byID)
	clear(ps.byKey)
	for _, p := range ps.peers {
		if p.key != nil {
			ps.byID[p.id] = p
			ps.byKey[string(p.key)] = p
		}
	}
}

// nameIDsLocked is the name -> id map (by address for unnamed peers).
func (ps *peerSet) nameIDsLocked() map[string]string {
	out := make(map[string]string, len(ps.peers))
	for addr, p := range ps.peers {
		out[p.cfg.Name+"\x00"+addr] = p.id
	}
	return out
}

// peerInfoLocked describes p with a copy of its key, the caller's to keep
// and change.
func (ps *peerSet) peerInfoLocked(p *peerEntry) PeerInfo {
	info := ps.sharedPeerInfoLocked(p)
	info.Key = append(ed25519.PublicKey(nil), p.key...)
	return info
}

// sharedPeerInfoLocked describes p with its key itself, not a copy, for
// the lookups of every request (LinkedPeer, LinkedPeerByKey), whose
// callers only read it. That is safe because a peer's key is never
// modified in place: pinning it (pinLocked, newPeerLocked) assigns a key
// parsed for it, and reindexLocked indexes it as a string copy.
func (ps *peerSet) sharedPeerInfoLocked(p *peerEntry) PeerInfo {
	info := PeerInfo{ID: p.id, Name: p.cfg.Name, Tier: p.cfg.Tier, Key: p.key}
	switch {
	case p.link != nil:
		info.Addr = p.link.conn.RemoteAddr()
	case p.ap.IsValid():
		info.Addr = net.UDPAddrFromAddrPort(p.ap)
	}
	return info
}

// linkChangedLocked wakes every awaitLink. ps.mu must be held.
func (ps *peerSet) linkChangedLocked() {
	close(ps.linkEvent)
	ps.linkEvent = make(chan struct{})
}

func (ps *peerSet) updateGaugeLocked() {
	counts := make(map[string]int, len(peerStates))
	for _, p := range ps.peers {
		counts[p.state]++
	}
	for _, s := range peerStates {
		ps.gauge.WithLabelValues(s).Set(float64(counts[s]))
	}
}

func (ps *peerSet) setState(p *peerEntry, state, lastErr string) {
	ps.mu.Lock()
	if ps.peers[p.cfg.Addr] == p && p.link == nil {
		p.state = state
		p.lastErr = lastErr
		ps.updateGaugeLocked()
	}
	ps.mu.Unlock()
}

func (ps *peerSet) quicConfigLocked() *quic.Config {
	ka := ps.cfg.keepalive()
	return &quic.Config{
		HandshakeIdleTimeout:  HandshakeTimeout,
		MaxIdleTimeout:        ka * IdleTimeoutFactor,
		KeepAlivePeriod:       ka,
		MaxIncomingStreams:    ps.cfg.maxStreams(),
		MaxIncomingUniStreams: -1,
		// Served streams' credit rides with the next answer (credits).
		RequireStreamCreditRelease: true,
		EnableDatagrams:            true, // liveness heartbeats
	}
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
