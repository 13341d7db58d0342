package mesh

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/identity"
)

// refusal is a refused handshake, recorded once the locks are released.
type refusal struct {
	key       ed25519.PublicKey
	addr      string
	direction string
	reason    string // one of the Refusal* reasons
	// sender keys the record: the remote IP for an inbound handshake
	// (not its port, which a caller picks anew for every attempt), the
	// configured address for an outbound one.
	sender string
}

// class is the Recorder budget the refusal takes. A key that differs
// from the one pinned for an address is evidence of an impostor (or of a
// peer's new key the operator must pin): it has its own budget, which a
// flood of strangers cannot take, and its senders are bounded (only the
// address of a configured peer gets this refusal). The other refusals of
// an inbound handshake come from addresses anyone can pick; those of an
// outbound one from a configured address.
func (r *refusal) class() chain.RecordClass {
	switch {
	case r.reason == RefusalKeyDiffers:
		return chain.ClassSecurity
	case r.direction == "inbound":
		return chain.ClassSource
	}
	return chain.ClassPeer
}

func (r *refusal) error() error {
	return fmt.Errorf("%s: %w", r.reason, ErrRefused)
}

// admission decides who may link: the TLS configs whose certificate
// checks admit a configured peer's pinned key and nothing else, the
// first-use pins (known_peers.json) and the records of refusals. It reads
// and marks the peers in the peerSet.
type admission struct {
	ident     *identity.Identity
	cert      tls.Certificate
	knownPath string
	ps        *peerSet
	audit     Auditor
	rec       Recorder
	log       *zap.Logger
	met       *metrics
	now       func() time.Time
	// pinned is called, never under the locks, when a pin on first use
	// altered the name -> id map.
	pinned func()

	// pinMu serialises admission decisions that may pin a key, so that
	// known_peers.json is written in pin order, and guards pins. It is
	// taken before peerSet.mu, never while holding it, and is held across
	// the pin file write.
	pinMu sync.Mutex
	pins  map[string]knownPeer // TOFU pins by configured address
}

// serverTLS is the listener's TLS config. Each handshake gets its own
// config whose certificate check knows the remote address, which admission
// on first use needs.
func (a *admission) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{ALPN},
		Certificates: []tls.Certificate{a.cert},
		ClientAuth:   tls.RequireAnyClientCert,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			var remote netip.AddrPort
			if hello.Conn != nil {
				remote = addrPortOf(hello.Conn.RemoteAddr())
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				NextProtos:   []string{ALPN},
				Certificates: []tls.Certificate{a.cert},
				ClientAuth:   tls.RequireAnyClientCert,
				VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
					return a.admitInbound(raw, remote)
				},
			}, nil
		},
	}
}

// clientTLS is the config for dialing p: the certificate chain is not
// verified against roots; the key is checked against p's pin instead.
func (a *admission) clientTLS(p *peerEntry, refused *bool) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		NextProtos:         []string{ALPN},
		Certificates:       []tls.Certificate{a.cert},
		InsecureSkipVerify: true, // VerifyPeerCertificate checks the pinned key
		ServerName:         "nodeld",
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			err := a.admitOutbound(raw, p)
			if err != nil {
				*refused = true
			}
			return err
		},
	}
}

// admitInbound decides a handshake from remote: a pinned key of a
// configured peer is admitted from anywhere; an unknown key only when
// remote is the address of a configured peer without a key yet, which
// pins it.
func (a *admission) admitInbound(raw [][]byte, remote netip.AddrPort) error {
	key, err := identity.PeerKey(raw)
	if err != nil {
		return a.refuse(nil, remote, "inbound", RefusalBadCertificate)
	}
	a.pinMu.Lock()
	defer a.pinMu.Unlock()
	a.ps.mu.Lock()
	if key.Equal(a.ident.PublicKey()) {
		a.ps.mu.Unlock()
		return a.refuse(key, remote, "inbound", RefusalOwnKey)
	}
	if a.ps.peerByKeyLocked(key) != nil {
		a.ps.mu.Unlock()
		return nil
	}
	var at *peerEntry
	if remote.IsValid() {
		for _, p := range a.ps.peers {
			if p.ap == remote {
				at = p
				break
			}
		}
	}
	if at == nil {
		a.ps.mu.Unlock()
		return a.refuse(key, remote, "inbound", RefusalNotAdmitted)
	}
	if at.key != nil {
		a.markRefusedKeyLocked(at, key)
		a.ps.mu.Unlock()
		return a.refuse(key, remote, "inbound", RefusalKeyDiffers)
	}
	return a.pinLocked(at, key) // unlocks ps.mu
}

// admitOutbound checks the key presented by p when dialing it: p's pinned
// key, or, without one, the first key seen there, which it pins.
func (a *admission) admitOutbound(raw [][]byte, p *peerEntry) error {
	key, err := identity.PeerKey(raw)
	if err != nil {
		return a.refuseOutbound(nil, p.cfg.Addr, RefusalBadCertificate)
	}
	a.pinMu.Lock()
	defer a.pinMu.Unlock()
	a.ps.mu.Lock()
	switch {
	case a.ps.peers[p.cfg.Addr] != p:
		a.ps.mu.Unlock()
		return a.refuseOutbound(key, p.cfg.Addr, RefusalPeerRemoved)
	case key.Equal(a.ident.PublicKey()):
		a.ps.mu.Unlock()
		return a.refuseOutbound(key, p.cfg.Addr, RefusalOwnKey)
	case p.key != nil && p.key.Equal(key):
		a.ps.mu.Unlock()
		return nil
	case p.key != nil:
		a.markRefusedKeyLocked(p, key)
		a.ps.mu.Unlock()
		return a.refuseOutbound(key, p.cfg.Addr, RefusalKeyDiffers)
	case a.ps.peerByKeyLocked(key) != nil:
		a.ps.mu.Unlock()
		return a.refuseOutbound(key, p.cfg.Addr, RefusalPinnedElse)
	}
	return a.pinLocked(p, key)
}

func (a *admission) markRefusedKeyLocked(p *peerEntry, key ed25519.PublicKey) {
	p.refusedKey = hex.EncodeToString(key)
	p.lastErr = "refused key " + p.refusedKey + ": differs from the pinned key"
	if p.link == nil {
		p.state = StateRefused
	}
	a.ps.updateGaugeLocked()
}

// pinLocked pins key for p on first use and persists the pins. Called with
// pinMu and ps.mu held; it releases ps.mu. A pin that cannot be persisted is
// rolled back and the handshake refused.
func (a *admission) pinLocked(p *peerEntry, key ed25519.PublicKey) error {
	pin := knownPeer{Addr: p.cfg.Addr, Key: hex.EncodeToString(key), ID: identity.NodeID(key), PinnedAt: a.now().UTC()}
	a.pins[p.cfg.Addr] = pin
	snapshot := maps.Clone(a.pins)
	a.ps.mu.Unlock()
	if err := writeKnownPeers(a.knownPath, snapshot); err != nil {
		a.ps.mu.Lock()
		delete(a.pins, p.cfg.Addr)
		a.ps.mu.Unlock()
		a.log.Error("known peers not written", zap.Error(err))
		return fmt.Errorf("pin %s: %w", p.cfg.Addr, err)
	}
	a.ps.mu.Lock()
	if a.ps.peers[p.cfg.Addr] == p && p.key == nil {
		p.key, p.id, p.from = key, pin.ID, PinnedFromTOFU
		p.refusedKey = ""
		a.ps.reindexLocked()
	}
	a.ps.mu.Unlock()
	a.log.Info("peer key pinned on first use", zap.String("addr", pin.Addr), zap.String("peer", pin.ID))
	if a.audit != nil {
		if err := a.audit.Record(AuditSource, KindPeerPinned, PinnedEvent{Addr: pin.Addr, Key: pin.Key, ID: pin.ID}); err != nil {
			a.log.Error("audit record not written", zap.String("kind", KindPeerPinned), zap.Error(err))
		}
	}
	a.pinned()
	return nil
}

// refuse records the refusal of an inbound handshake from remote and
// returns the handshake error. Called without ps.mu.
func (a *admission) refuse(key ed25519.PublicKey, remote netip.AddrPort, direction, reason string) error {
	sender := "unknown"
	if remote.IsValid() {
		sender = remote.Addr().String()
	}
	r := &refusal{key: key, addr: remote.String(), direction: direction, reason: reason, sender: sender}
	a.record(r)
	return r.error()
}

// refuseOutbound records the refusal of the handshake of a dial to the
// configured address addr and returns the handshake error. Called without
// ps.mu.
func (a *admission) refuseOutbound(key ed25519.PublicKey, addr, reason string) error {
	r := &refusal{key: key, addr: addr, direction: "outbound", reason: reason, sender: addr}
	a.record(r)
	return r.error()
}

// record counts a refusal and hands it to the Recorder, which
// chains the first of its key per period and counts the rest; it is
// logged when chained. Called without ps.mu.
func (a *admission) record(r *refusal) {
	a.met.handshakes.WithLabelValues(handshakeRefused).Inc()
	ev := RefusedEvent{Addr: r.addr, Direction: r.direction, Reason: r.reason}
	if r.key != nil {
		ev.Key = hex.EncodeToString(r.key)
	}
	fields := []zap.Field{zap.String("addr", ev.Addr), zap.String("key", ev.Key),
		zap.String("direction", ev.Direction), zap.String("reason", ev.Reason)}
	if a.rec == nil {
		a.log.Debug("peer refused", fields...)
		return
	}
	chained, err := a.rec.Record(chain.RecordKey{Class: r.class(), Sender: r.sender, Kind: KindPeerRefused, Reason: r.reason}, AuditSource, ev)
	switch {
	case err != nil:
		a.log.Error("audit record not written", append(fields, zap.String("kind", KindPeerRefused), zap.Error(err))...)
	case chained:
		a.log.Warn("peer refused", fields...)
	default:
		a.met.suppressed.Inc()
	}
}

func hexKey(k ed25519.PublicKey) string { return hex.EncodeToString(k) }

// dropSupersededPinsLocked removes the first-use pins of addresses whose
// configured peer now names a key: the operator's key supersedes the pin
// for good, so removing that key later must not bring the old pin back.
// It returns the addresses dropped, sorted; the caller persists the pins.
// pinMu must be held (or the mesh not yet shared).
func (a *admission) dropSupersededPinsLocked(cfg Config) []string {
	var dropped []string
	for _, pc := range cfg.Peers {
		if pc.Key == "" {
			continue
		}
		if _, ok := a.pins[pc.Addr]; ok {
			delete(a.pins, pc.Addr)
			dropped = append(dropped, pc.Addr)
		}
	}
	slices.Sort(dropped)
	return dropped
}

// newPeerLocked builds a peer entry, with its configured key or its pin;
// the config was validated. pinMu must be held (or the mesh not yet
// shared).
func (a *admission) newPeerLocked(pc PeerConfig) *peerEntry {
	p := &peerEntry{cfg: pc, state: StateConnecting}
	if pc.Key != "" {
		p.cfgKey, _ = identity.ParsePublicKeyHex(pc.Key)
		p.key, p.id, p.from = p.cfgKey, identity.NodeID(p.cfgKey), PinnedFromConfig
	} else if pin, ok := a.pins[pc.Addr]; ok {
		k, _ := identity.ParsePublicKeyHex(pin.Key)
		p.key, p.id, p.from = k, identity.NodeID(k), PinnedFromTOFU
	}
	if ap, err := netip.ParseAddrPort(pc.Addr); err == nil {
		p.ap = normAddrPort(ap)
	}
	return p
}
