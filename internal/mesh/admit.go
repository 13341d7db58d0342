package mesh

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"

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

// serverTLS is the listener's TLS config. Each handshake gets its own
// config whose certificate check knows the remote address, which admission
// on first use needs.
func (m *Mesh) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{ALPN},
		Certificates: []tls.Certificate{m.cert},
		ClientAuth:   tls.RequireAnyClientCert,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			var remote netip.AddrPort
			if hello.Conn != nil {
				remote = addrPortOf(hello.Conn.RemoteAddr())
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				NextProtos:   []string{ALPN},
				Certificates: []tls.Certificate{m.cert},
				ClientAuth:   tls.RequireAnyClientCert,
				VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
					return m.admitInbound(raw, remote)
				},
			}, nil
		},
	}
}

// clientTLS is the config for dialing p: the certificate chain is not
// verified against roots; the key is checked against p's pin instead.
func (m *Mesh) clientTLS(p *peerEntry, refused *bool) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		NextProtos:         []string{ALPN},
		Certificates:       []tls.Certificate{m.cert},
		InsecureSkipVerify: true, // VerifyPeerCertificate checks the pinned key
		ServerName:         "nodeld",
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			err := m.admitOutbound(raw, p)
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
func (m *Mesh) admitInbound(raw [][]byte, remote netip.AddrPort) error {
	key, err := identity.PeerKey(raw)
	if err != nil {
		return m.refuse(nil, remote, "inbound", RefusalBadCertificate)
	}
	m.pinMu.Lock()
	defer m.pinMu.Unlock()
	m.mu.Lock()
	if key.Equal(m.ident.PublicKey()) {
		m.mu.Unlock()
		return m.refuse(key, remote, "inbound", RefusalOwnKey)
	}
	if m.peerByKeyLocked(key) != nil {
		m.mu.Unlock()
		return nil
	}
	var at *peerEntry
	if remote.IsValid() {
		for _, p := range m.peers {
			if p.ap == remote {
				at = p
				break
			}
		}
	}
	if at == nil {
		m.mu.Unlock()
		return m.refuse(key, remote, "inbound", RefusalNotAdmitted)
	}
	if at.key != nil {
		m.markRefusedKeyLocked(at, key)
		m.mu.Unlock()
		return m.refuse(key, remote, "inbound", RefusalKeyDiffers)
	}
	return m.pinLocked(at, key) // unlocks mu
}

// admitOutbound checks the key presented by p when dialing it: p's pinned
// key, or, without one, the first key seen there, which it pins.
func (m *Mesh) admitOutbound(raw [][]byte, p *peerEntry) error {
	key, err := identity.PeerKey(raw)
	if err != nil {
		return m.refuseOutbound(nil, p.cfg.Addr, RefusalBadCertificate)
	}
	m.pinMu.Lock()
	defer m.pinMu.Unlock()
	m.mu.Lock()
	switch {
	case m.peers[p.cfg.Addr] != p:
		m.mu.Unlock()
		return m.refuseOutbound(key, p.cfg.Addr, RefusalPeerRemoved)
	case key.Equal(m.ident.PublicKey()):
		m.mu.Unlock()
		return m.refuseOutbound(key, p.cfg.Addr, RefusalOwnKey)
	case p.key != nil && p.key.Equal(key):
		m.mu.Unlock()
		return nil
	case p.key != nil:
		m.markRefusedKeyLocked(p, key)
		m.mu.Unlock()
		return m.refuseOutbound(key, p.cfg.Addr, RefusalKeyDiffers)
	case m.peerByKeyLocked(key) != nil:
		m.mu.Unlock()
		return m.refuseOutbound(key, p.cfg.Addr, RefusalPinnedElse)
	}
	return m.pinLocked(p, key)
}

func (m *Mesh) markRefusedKeyLocked(p *peerEntry, key ed25519.PublicKey) {
	p.refusedKey = hex.EncodeToString(key)
	p.lastErr = "refused key " + p.refusedKey + ": differs from the pinned key"
	if p.link == nil {
		p.state = StateRefused
	}
	m.updateGaugeLocked()
}

// pinLocked pins key for p on first use and persists the pins. Called with
// pinMu and mu held; it releases mu. A pin that cannot be persisted is
// rolled back and the handshake refused.
func (m *Mesh) pinLocked(p *peerEntry, key ed25519.PublicKey) error {
	pin := knownPeer{Addr: p.cfg.Addr, Key: hex.EncodeToString(key), ID: identity.NodeID(key), PinnedAt: m.now().UTC()}
	m.pins[p.cfg.Addr] = pin
	snapshot := maps.Clone(m.pins)
	m.mu.Unlock()
	if err := writeKnownPeers(m.knownPath, snapshot); err != nil {
		m.mu.Lock()
		delete(m.pins, p.cfg.Addr)
		m.mu.Unlock()
		m.log.Error("known peers not written", zap.Error(err))
		return fmt.Errorf("pin %s: %w", p.cfg.Addr, err)
	}
	m.mu.Lock()
	if m.peers[p.cfg.Addr] == p && p.key == nil {
		p.key, p.id, p.from = key, pin.ID, PinnedFromTOFU
		p.refusedKey = ""
	}
	m.mu.Unlock()
	m.log.Info("peer key pinned on first use", zap.String("addr", pin.Addr), zap.String("peer", pin.ID))
	if m.audit != nil {
		if err := m.audit.Record(AuditSource, KindPeerPinned, PinnedEvent{Addr: pin.Addr, Key: pin.Key, ID: pin.ID}); err != nil {
			m.log.Error("audit record not written", zap.String("kind", KindPeerPinned), zap.Error(err))
		}
	}
	m.signalPeersChanged()
	return nil
}

// refuse records the refusal of an inbound handshake from remote and
// returns the handshake error. Called without mu.
func (m *Mesh) refuse(key ed25519.PublicKey, remote netip.AddrPort, direction, reason string) error {
	sender := "unknown"
	if remote.IsValid() {
		sender = remote.Addr().String()
	}
	r := &refusal{key: key, addr: remote.String(), direction: direction, reason: reason, sender: sender}
	m.recordRefusal(r)
	return r.error()
}

// refuseOutbound records the refusal of the handshake of a dial to the
// configured address addr and returns the handshake error. Called without
// mu.
func (m *Mesh) refuseOutbound(key ed25519.PublicKey, addr, reason string) error {
	r := &refusal{key: key, addr: addr, direction: "outbound", reason: reason, sender: addr}
	m.recordRefusal(r)
	return r.error()
}

// recordRefusal counts a refusal and hands it to the Recorder, which
// chains the first of its key per period and counts the rest; it is
// logged when chained. Called without mu.
func (m *Mesh) recordRefusal(r *refusal) {
	m.met.handshakes.WithLabelValues(handshakeRefused).Inc()
	ev := RefusedEvent{Addr: r.addr, Direction: r.direction, Reason: r.reason}
	if r.key != nil {
		ev.Key = hex.EncodeToString(r.key)
	}
	fields := []zap.Field{zap.String("addr", ev.Addr), zap.String("key", ev.Key),
		zap.String("direction", ev.Direction), zap.String("reason", ev.Reason)}
	if m.rec == nil {
		m.log.Debug("peer refused", fields...)
		return
	}
	chained, err := m.rec.Record(chain.RecordKey{Class: r.class(), Sender: r.sender, Kind: KindPeerRefused, Reason: r.reason}, AuditSource, ev)
	switch {
	case err != nil:
		m.log.Error("audit record not written", append(fields, zap.String("kind", KindPeerRefused), zap.Error(err))...)
	case chained:
		m.log.Warn("peer refused", fields...)
	default:
		m.met.suppressed.Inc()
	}
}

func hexKey(k ed25519.PublicKey) string { return hex.EncodeToString(k) }
