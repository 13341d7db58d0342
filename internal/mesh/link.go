package mesh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/table"
)

func (m *Mesh) acceptLoop(ctx context.Context, ln *quic.Listener) {
	for {
		conn, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		m.adopt(conn, nil)
	}
}

// preferNew decides between a peer's current link and a new one. A new
// link arriving well after the current one means the peer lost the old
// one: the new one wins. Within DuplicateSettleWindow both sides hold the
// same two links and keep the one dialed by the lower node id; between two
// links of the same dialer the newer wins.
func preferNew(curDialer string, curUp time.Time, newDialer string, now time.Time, low string) bool {
	if now.Sub(curUp) > DuplicateSettleWindow || curDialer == newDialer {
		return true
	}
	return newDialer == low
}

func connKey(conn *quic.Conn) ed25519.PublicKey {
	certs := conn.ConnectionState().TLS.PeerCertificates
	if len(certs) == 0 {
		return nil
	}
	k, _ := certs[0].PublicKey.(ed25519.PublicKey)
	return k
}

// connCert is the certificate the peer of conn presented. A node makes a
// new certificate (with a random serial) each time it starts, so two
// links carrying different certificates of one key reach two different
// runs of the peer.
func connCert(conn *quic.Conn) []byte {
	certs := conn.ConnectionState().TLS.PeerCertificates
	if len(certs) == 0 {
		return nil
	}
	return certs[0].Raw
}

// replacesRun reports whether a new link to old's peer reaches a newer
// run of it than old does: old's connection has already ended, or the
// peer presented another certificate, which it does only after a
// restart. Such a link replaces old at once, whatever DuplicateSettleWindow
// and the dialers say: old leads to a run that is gone.
func replacesRun(old *link, cert []byte) bool {
	return old.conn.Context().Err() != nil || !bytes.Equal(old.cert, cert)
}

// adopt makes a handshaken connection its peer's link, or closes it.
// dialed is the peer dialed for an outbound connection, nil for an
// accepted one. It reports whether the connection became the link.
func (m *Mesh) adopt(conn *quic.Conn, dialed *peerEntry) bool {
	key := connKey(conn)
	m.mu.Lock()
	p := dialed
	if p == nil && key != nil {
		p = m.peerByKeyLocked(key)
	}
	m.met.bytes.track(conn)
	if m.closing || p == nil || key == nil || m.peers[p.cfg.Addr] != p || !p.key.Equal(key) {
		m.mu.Unlock()
		_ = conn.CloseWithError(CodeNotAdmitted, "not admitted")
		m.met.bytes.retire(conn)
		return false
	}
	now := m.now()
	self := m.ident.ID()
	dialer := p.id
	if dialed != nil {
		dialer = self
	}
	low := min(self, p.id)
	old := p.link
	cert := connCert(conn)
	stale := old != nil && replacesRun(old, cert)
	if old != nil && !stale && !preferNew(old.dialer, old.up, dialer, now, low) {
		// The peer may have opened streams on conn before it settled on
		// the other link too: they are served while conn drains.
		loser := &link{
			conn: conn, cert: cert, peer: p, peerID: p.id, dialer: dialer, outbound: dialed != nil, up: now,
			done: make(chan struct{}), kick: make(chan struct{}, 1),
		}
		close(loser.done)
		m.drainLocked(conn)
		m.serveDrainingLocked(loser)
		m.mu.Unlock()
		m.met.handshakes.WithLabelValues(handshakeOK).Inc()
		return false
	}
	l := &link{
		conn: conn, cert: cert, peer: p, peerID: p.id, dialer: dialer, outbound: dialed != nil, up: now,
		done: make(chan struct{}), kick: make(chan struct{}, 1),
	}
	if old != nil {
		close(old.done)
		if !stale && now.Sub(old.up) <= DuplicateSettleWindow {
			// A simultaneous dial: streams may already be open on the
			// losing connection, so it is closed only after they had time
			// to finish.
			m.drainLocked(old.conn)
			old = nil
		}
	}
	p.link = l
	p.state = StateConnected
	p.lastErr = ""
	p.resetAt = time.Time{}
	p.awayAt = time.Time{}
	m.linkChangedLocked()
	m.emitLocked(queuedEvent{ev: table.PeerEvent{Kind: table.PeerLinkUp, Node: p.id}})
	m.updateGaugeLocked()
	m.wg.Go(func() { m.serveLink(l) })
	m.wg.Go(func() { m.advertSender(l) })
	liveness := m.cfg.livenessTimeout()
	m.wg.Go(func() { m.watchLiveness(l, liveness) })
	if m.onLinkUp != nil && m.runCtx != nil {
		runCtx, info := m.runCtx, m.peerInfoLocked(p)
		m.wg.Go(func() { m.linkUpHook(runCtx, l, info) })
	}
	m.mu.Unlock()

	m.met.handshakes.WithLabelValues(handshakeOK).Inc()
	switch {
	case old != nil && stale:
		_ = old.conn.CloseWithError(CodeStale, "peer restarted")
	case old != nil:
		_ = old.conn.CloseWithError(CodeDuplicate, "duplicate link")
	}
	m.log.Info("peer link up", zap.String("peer", l.peerID), zap.Stringer("addr", conn.RemoteAddr()),
		zap.Bool("outbound", l.outbound))
	l.poke()
	return true
}

// linkUpHook calls OnLinkUp for l with a context that ends when l stops
// being its peer's link or the mesh stops.
func (m *Mesh) linkUpHook(runCtx context.Context, l *link, info PeerInfo) {
	ctx, cancel := context.WithCancel(runCtx)
	defer cancel()
	m.wg.Go(func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	})
	m.onLinkUp(ctx, info)
}

// drainLocked closes a duplicate connection after DuplicateDrain, or at
// once when the mesh stops. Streams opened on it while both sides settled
// on the other link finish meanwhile; new ones go to the link. Run waits
// for the goroutine. m.mu must be held.
func (m *Mesh) drainLocked(conn *quic.Conn) {
	runCtx := m.runCtx
	if runCtx == nil {
		_ = conn.CloseWithError(CodeDuplicate, "duplicate link")
		m.met.bytes.retire(conn)
		return
	}
	m.wg.Go(func() {
		t := time.NewTimer(DuplicateDrain)
		defer t.Stop()
		select {
		case <-t.C:
		case <-runCtx.Done():
		case <-conn.Context().Done():
		}
		_ = conn.CloseWithError(CodeDuplicate, "duplicate link")
		m.met.bytes.retire(conn)
	})
}

// serveDrainingLocked serves the streams the peer opens on l, a link that
// lost a simultaneous dial and drains, until its connection ends: the
// peer may not have learned yet that the other link won. m.mu is held.
func (m *Mesh) serveDrainingLocked(l *link) {
	runCtx := m.runCtx
	if runCtx == nil {
		return
	}
	m.wg.Go(func() {
		ctx, cancel := context.WithCancel(runCtx)
		defer cancel()
		stop := context.AfterFunc(l.conn.Context(), cancel)
		defer stop()
		cr := newCredits()
		for {
			s, err := l.conn.AcceptStream(ctx)
			if err != nil {
				return
			}
			m.goServe(runCtx, func() { m.serveAccepted(ctx, l, s, cr) })
		}
	})
}

// serveLink accepts the link's streams until the connection ends, then
// retires the link.
func (m *Mesh) serveLink(l *link) {
	m.mu.Lock()
	runCtx := m.runCtx
	m.mu.Unlock()
	ctx, cancel := context.WithCancel(runCtx)
	stop := context.AfterFunc(l.conn.Context(), cancel)
	defer stop()
	cr := newCredits()
	var acceptErr error
	for {
		s, err := l.conn.AcceptStream(ctx)
		if err != nil {
			acceptErr = err
			break
		}
		m.goServe(runCtx, func() { m.serveAccepted(ctx, l, s, cr) })
	}
	cancel()
	m.met.bytes.retire(l.conn)
	m.linkLost(l, endCause(l, acceptErr))
}

// endCause is why l's connection ended, given err, the error a call on it
// failed with because it ended. quic-go fails its calls with the close
// error before it cancels the connection's context, so the context may
// carry no cause yet: then err is the cause. (A stateless reset must be
// known as one, or a forward retried on the peer's new run does not wait
// for its link: TestMeshForwardAfterPeerRestart failed 1 run in 40 to 90
// that way.)
func endCause(l *link, err error) error {
	if cause := context.Cause(l.conn.Context()); cause != nil {
		return cause
	}
	return err
}

// linkLost retires l when it is still its peer's link: the dial loop
// reconnects, and the loss is reported (PeerLinkLost) for the table to
// decide what becomes of the peer's routes. It changes no route itself,
// whoever calls it (OpenStream does, for a link it finds ended).
// When the peer restarted (a stateless reset) or closed the link
// stopping (CodeShutdown: a `systemctl restart`, an upgrade) the mesh
// waits for its next link for at most the restart wait (see
// expireRestart): it holds requests to it meanwhile, and says so in the
// event (Wait), so that the table can keep the peer's routes for a
// request that nothing else serves: such a request had better wait for
// the new run than fail. A peer stopped for good costs it the rest of the
// wait before the same 503.
func (m *Mesh) linkLost(l *link, cause error) {
	m.mu.Lock()
	p := l.peer
	current := m.peers[p.cfg.Addr] == p && p.link == l
	keep := false
	if current {
		p.link = nil
		close(l.done)
		m.linkChangedLocked()
		p.state = StateReconnecting
		p.lastErr = "link lost"
		if cause != nil {
			p.lastErr = "link lost: " + cause.Error()
		}
		ev := queuedEvent{ev: table.PeerEvent{Kind: table.PeerLinkLost, Node: l.peerID, Loss: table.LossDropped}}
		if restarted(cause) {
			p.resetAt = time.Now()
			ev.ev.Loss = table.LossRestarted
		} else if stopping(cause) {
			ev.ev.Loss = table.LossStopping
		}
		if restarted(cause) || stopping(cause) {
			p.awayAt = time.Now()
			// Only while Run runs: the expiry is one of its goroutines.
			keep = m.runCtx != nil && !m.closing
		}
		if keep {
			ev.until = p.awayAt.Add(m.restartWait)
		}
		m.emitLocked(ev)
		m.updateGaugeLocked()
		if keep {
			runCtx, awayAt := m.runCtx, p.awayAt
			m.wg.Go(func() { m.expireRestart(runCtx, p, awayAt) })
		}
	}
	m.mu.Unlock()
	if !current {
		return
	}
	m.log.Info("peer link lost", zap.String("peer", l.peerID), zap.Bool("waiting_for_link", keep), zap.Error(cause))
}

// expireRestart ends the wait for p's next link, begun by linkLost when
// p's link ended at awayAt because p restarted or stopped, unless a new
// link to p came within the restart wait: it reports PeerWaitOver (the
// table drops the routes still waiting; a new link's first round ended
// the wait before, Table.Linked) and, for a peer that closed its link
// stopping, calls OnPeerStopped. The kept routes stop resolving at the
// end of the wait by themselves, so a round in flight is never raced. The
// mesh stopping ends the wait at once: no link will come.
func (m *Mesh) expireRestart(runCtx context.Context, p *peerEntry, awayAt time.Time) {
	t := time.NewTimer(m.restartWait - time.Since(awayAt))
	defer t.Stop()
	select {
	case <-t.C:
	case <-runCtx.Done():
	}
	m.mu.Lock()
	id := p.id
	waiting := m.peers[p.cfg.Addr] == p && p.link == nil && p.awayAt.Equal(awayAt)
	// Closed for shutdown rather than reset by a new run (resetAt).
	stopped := waiting && p.resetAt.IsZero() && runCtx.Err() == nil
	if waiting {
		m.emitLocked(queuedEvent{ev: table.PeerEvent{Kind: table.PeerWaitOver, Node: id, Stopped: stopped}})
	}
	m.mu.Unlock()
	if !waiting {
		// Linked again (its first round ends the wait), restarted again
		// (its own expiry runs), or removed from the config (PeerRemoved
		// dropped the routes).
		return
	}
	m.log.Info("peer did not link again within the restart wait",
		zap.String("peer", id), zap.Bool("stopped", stopped), zap.Duration("waited", m.restartWait))
}

// dialLoop keeps p linked: it dials while p has no link, with capped
// exponential backoff and jitter between failures, and waits while it has
// one.
func (m *Mesh) dialLoop(ctx context.Context, p *peerEntry) {
	attempt := 0
	for {
		m.mu.Lock()
		l := p.link
		m.mu.Unlock()
		if l != nil {
			select {
			case <-ctx.Done():
				return
			case <-l.done:
			}
			if time.Since(l.up) > BackoffMax {
				attempt = 0
			}
			if restarted(context.Cause(l.conn.Context())) {
				// The peer answered with a stateless reset: it is up again
				// after a restart, and callers wait for a link to it.
				continue
			}
		} else {
			err := m.dialOnce(ctx, p)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				continue
			}
		}
		if !sleepCtx(ctx, backoffDelay(attempt, m.rand())) {
			return
		}
		attempt++
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// dialOnce dials p once; nil means p has a link now (this one or one that
// won against it).
func (m *Mesh) dialOnce(ctx context.Context, p *peerEntry) error {
	m.mu.Lock()
	ap, addr, tr, qconf := p.ap, p.cfg.Addr, m.tr, m.quicConfigLocked()
	m.mu.Unlock()
	if !ap.IsValid() {
		resolved, err := resolveAddr(ctx, addr)
		if err != nil {
			m.met.handshakes.WithLabelValues(handshakeError).Inc()
			m.setState(p, StateReconnecting, err.Error())
			return err
		}
		ap = resolved
		m.mu.Lock()
		p.ap = ap
		m.mu.Unlock()
	}
	refused := false
	dctx, cancel := context.WithTimeout(ctx, 2*HandshakeTimeout)
	defer cancel()
	conn, err := tr.Dial(dctx, net.UDPAddrFromAddrPort(ap), m.clientTLS(p, &refused), qconf)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		state := StateReconnecting
		if refused {
			state = StateRefused
		} else {
			m.met.handshakes.WithLabelValues(handshakeError).Inc()
		}
		m.mu.Lock()
		if m.peers[p.cfg.Addr] == p && p.link == nil {
			p.state = state
			if !refused || p.lastErr == "" {
				p.lastErr = "dial: " + err.Error()
			}
			m.updateGaugeLocked()
		}
		m.mu.Unlock()
		m.log.Debug("peer dial failed", zap.String("addr", addr), zap.Error(err))
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	m.adopt(conn, p)
	m.mu.Lock()
	linked := p.link != nil
	m.mu.Unlock()
	if !linked {
		return fmt.Errorf("dial %s: link not kept", addr)
	}
	return nil
}

func resolveAddr(ctx context.Context, addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("peer address %q: %w", addr, err)
	}
	pn, err := net.DefaultResolver.LookupPort(ctx, "udp", port)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("peer address %q: %w", addr, err)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("resolve peer address %q: %w", addr, err)
	}
	return normAddrPort(netip.AddrPortFrom(ips[0], uint16(pn))), nil
}

// workerIdle is how long a stream worker waits for its next stream
// before it ends.
const workerIdle = 5 * time.Second

// goServe runs serve, an accepted stream's handling, on an idle worker
// goroutine, or on a new one when none is idle. A worker waits for its
// next stream up to workerIdle, until runCtx ends: a request's handling
// grows a goroutine's stack to tens of KiB, which a new goroutine for
// every stream copied several times over (runtime.copystack was a tenth of
// the serving node's CPU at concurrency 1). Goroutines stay one per stream
// in progress, bounded by the peers' stream limits.
func (m *Mesh) goServe(runCtx context.Context, serve func()) {
	select {
	case m.work <- serve:
	default:
		m.wg.Go(func() { m.worker(runCtx, serve) })
	}
}

func (m *Mesh) worker(runCtx context.Context, serve func()) {
	serve()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		select {
		case serve = <-m.work:
			serve()
			t.Reset(workerIdle)
		case <-t.C:
			return
		case <-runCtx.Done():
			return
		}
	}
}

// serveAccepted serves a stream the peer opened on l, then gives its
// credit back to cr (the peer may open another in its place): with the
// next answer written on the link, or soon anyway.
func (m *Mesh) serveAccepted(ctx context.Context, l *link, qs *quic.Stream, cr *credits) {
	s := newStream(qs)
	s.cr = cr
	m.serveStream(ctx, l, s)
	cr.done(qs)
}

// serveStream reads the kind byte of an incoming stream and dispatches it.
func (m *Mesh) serveStream(ctx context.Context, l *link, s *Stream) {
	_ = s.SetReadDeadline(time.Now().Add(StreamHeadTimeout))
	kind, err := readKind(s)
	if err != nil {
		code, result := StreamCodeMalformed, resultMalformed
		var ne net.Error
		switch {
		case errors.Is(err, errUnknownKind):
			code, result = StreamCodeUnknownKind, resultUnknownKind
		case errors.As(err, &ne) && ne.Timeout():
			code, result = StreamCodeTimeout, resultTimeout
		}
		s.Reset(code)
		m.met.stream(kind, result)
		return
	}
	_ = s.SetReadDeadline(time.Time{})
	if kind == KindAdvert {
		m.receiveAdverts(ctx, l, s)
		return
	}
	m.mu.Lock()
	h := m.handlers[kind]
	info := m.peerInfoLocked(l.peer)
	m.mu.Unlock()
	if h == nil {
		s.Reset(StreamCodeNoHandler)
		m.met.stream(kind, resultNoHandler)
		return
	}
	info.Addr = l.conn.RemoteAddr()
	m.met.stream(kind, resultDispatched)
	h(ctx, info, s)
}

var errUnknownKind = errors.New("unknown stream kind")

// readKind reads the first byte of a stream: a known StreamKind or
// errUnknownKind (with the unknown kind returned for the metric label).
func readKind(r io.Reader) (StreamKind, error) {
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	k := StreamKind(b[0])
	if k.String() == "unknown" {
		return k, fmt.Errorf("kind %d: %w", b[0], errUnknownKind)
	}
	return k, nil
}

// receiveAdverts takes one advert frame from l's peer and reports it
// (PeerRound), acknowledging it once delivered. The sender id is the
// link's verified id, whatever the advertisements say. ctx ends with the
// link or the mesh.
func (m *Mesh) receiveAdverts(ctx context.Context, l *link, s *Stream) {
	_ = s.SetReadDeadline(time.Now().Add(AdvertSendTimeout))
	fail := func(code StreamCode, result string, err error) {
		s.Reset(code)
		m.met.stream(KindAdvert, result)
		m.log.Debug("advert stream refused", zap.String("peer", l.peerID), zap.Error(err))
	}
	typ, payload, err := ReadFrame(s, MaxAdvertFrameBytes)
	switch {
	case errors.Is(err, ErrFrameTooLarge):
		fail(StreamCodeTooLarge, resultTooLarge, err)
		return
	case err != nil:
		fail(StreamCodeMalformed, resultMalformed, err)
		return
	case typ != FrameAdverts:
		fail(StreamCodeMalformed, resultMalformed, fmt.Errorf("frame type %d", typ))
		return
	}
	ads, err := decodeAdverts(payload)
	if errors.Is(err, errTooManyAdverts) {
		fail(StreamCodeTooLarge, resultTooLarge, err)
		return
	}
	if err != nil {
		fail(StreamCodeMalformed, resultMalformed, err)
		return
	}
	var one [1]byte
	if n, err := s.Read(one[:]); n > 0 || !errors.Is(err, io.EOF) {
		fail(StreamCodeMalformed, resultMalformed, fmt.Errorf("data after the advert frame: %v", err))
		return
	}
	// Which link the round came on, decided with the link changes it is
	// ordered among. A round read while its link was being lost lands
	// after the loss (RoundLate). A peer that restarted a moment ago is
	// still waited for: a round of its old link is as any other's
	// (RoundOther), and only a round of its current link ends the wait.
	m.mu.Lock()
	p := l.peer
	gone := p.link == nil
	waiting := gone && !p.awayAt.IsZero() && time.Since(p.awayAt) < m.restartWait
	round := table.RoundOther
	switch {
	case p.link == l:
		round = table.RoundCurrent
	case gone && !waiting:
		round = table.RoundLate
	}
	done := make(chan struct{})
	m.emitLocked(queuedEvent{ev: table.PeerEvent{Kind: table.PeerRound, Node: l.peerID, Adverts: ads, Round: round}, done: done})
	m.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		s.Reset(StreamCodeCancelled)
		return
	}
	_ = s.CloseWrite()
	m.met.stream(KindAdvert, resultOK)
}

// advertSender sends l's peer a round of advertisements whenever poked,
// one round at a time, until l is retired.
func (m *Mesh) advertSender(l *link) {
	for {
		select {
		case <-l.done:
			return
		case <-l.kick:
		}
		if err := m.sendAdverts(l); err != nil {
			m.log.Debug("advertisements not sent", zap.String("peer", l.peerID), zap.Error(err))
		}
	}
}

// advertsFor is the advert frame for a peer: the table's advertisements of
// the roles it serves to that peer (by id or configured name; default
// deny), then the extra advertisements every peer gets.
func (m *Mesh) advertsFor(peerID, peerName string) []table.Advertisement {
	all := m.tbl.Advertisements(m.now())
	ads := all[:0:0]
	for _, ad := range all {
		role, _ := strings.CutPrefix(ad.Name, table.ServicePrefix)
		if !m.tbl.MeshPeerAllowed(role, peerID) && (peerName == "" || !m.tbl.MeshPeerAllowed(role, peerName)) {
			continue
		}
		ads = append(ads, ad)
	}
	if m.extra != nil {
		ads = append(ads, m.extra()...)
	}
	if len(ads) > MaxAdvertsPerFrame {
		m.log.Warn("advertisements over the frame bound left out", zap.Int("count", len(ads)))
		ads = ads[:MaxAdvertsPerFrame]
	}
	return ads
}

func (m *Mesh) sendAdverts(l *link) error {
	m.mu.Lock()
	runCtx, name := m.runCtx, l.peer.cfg.Name
	m.mu.Unlock()
	if runCtx == nil {
		return nil
	}
	payload, err := encodeAdverts(m.advertsFor(l.peerID, name))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(runCtx, AdvertSendTimeout)
	defer cancel()
	stop := context.AfterFunc(l.conn.Context(), cancel)
	defer stop()
	qs, err := l.conn.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("open advert stream: %w", err)
	}
	s := newStream(qs)
	m.met.stream(KindAdvert, resultOpened)
	deadline, _ := ctx.Deadline()
	_ = s.SetDeadline(deadline)
	if _, err := s.Write([]byte{byte(KindAdvert)}); err != nil {
		s.Reset(StreamCodeCancelled)
		return fmt.Errorf("write advert stream: %w", err)
	}
	if err := WriteFrame(s, FrameAdverts, payload); err != nil {
		s.Reset(StreamCodeCancelled)
		return fmt.Errorf("write advert frame: %w", err)
	}
	_ = s.CloseWrite()
	// The receiver closes its side once it has taken the frame.
	var one [1]byte
	if n, err := s.Read(one[:]); n > 0 || !errors.Is(err, io.EOF) {
		s.StopReading(StreamCodeMalformed)
		return fmt.Errorf("advert stream not acknowledged: %v", err)
	}
	return nil
}

// advertLoop pokes every link's advert sender on table changes and every
// advert interval.
func (m *Mesh) advertLoop(ctx context.Context) {
	sub, unsub := m.tbl.Subscribe()
	defer unsub()
	m.mu.Lock()
	interval := m.cfg.advertInterval()
	m.mu.Unlock()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub:
		case <-t.C:
			m.mu.Lock()
			if iv := m.cfg.advertInterval(); iv != interval {
				interval = iv
				t.Reset(iv)
			}
			m.mu.Unlock()
		}
		m.pokeAll()
	}
}

func (m *Mesh) pokeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.peers {
		if p.link != nil {
			p.link.poke()
		}
	}
}

// OpenStream opens a stream of kind on the existing link to nodeID. The
// kind byte is sent with the caller's first Write (or CloseWrite, Close),
// so a request written at once leaves with it. It never dials: without a
// live link it returns ErrNoLink, except that a peer whose link ended
// with a stateless reset (it restarted) less than RestartLinkWait ago is
// waited for, within ctx (ErrNoLink when the wait ends without a link).
// A link found ended when the stream is opened
// (nothing was sent on the stream) is retired, and the stream is opened on
// the peer's next link: at once when there is one, or once it comes up
// (within RestartLinkWait and ctx) when the old link ended as stale. That
// is choosing a link, not sending anything again; the loss is reported
// (PeerLinkLost) and OpenStream changes no route. A stream other than an
// inference stream whose link turns out to lead to a previous run of the
// peer is sent again on the new run's link when no run can have read it
// (see replay); an inference stream fails instead, and the proxy, which
// owns a forward's retry, sends it again (PeerRestarted). The caller owns
// the stream and must end it (Close, CloseWrite or Reset).
func (m *Mesh) OpenStream(ctx context.Context, nodeID string, kind StreamKind) (*Stream, error) {
	if kind == KindAdvert || kind.String() == "unknown" {
		return nil, fmt.Errorf("open stream of kind %d: not a handler kind", kind)
	}
	m.mu.Lock()
	var l *link
	var wait time.Duration
	if p := m.peerByIDLocked(nodeID); p != nil {
		l = p.link
		switch {
		case l != nil:
		case !p.resetAt.IsZero():
			wait = m.restartWait - time.Since(p.resetAt)
		case kind == KindInfer && !p.awayAt.IsZero():
			// A peer that closed its link stopping: only a request
			// waits for its return (its routes are kept for that), a
			// control call or a fetch fails at once as before.
			wait = m.restartWait - time.Since(p.awayAt)
		}
	}
	m.mu.Unlock()
	if l == nil && wait > 0 {
		// The peer restarted a moment ago: its new run is linking.
		wctx, cancel := context.WithTimeout(ctx, wait)
		l, _ = m.awaitLink(wctx, nodeID, nil)
		cancel()
	}
	if l == nil {
		return nil, fmt.Errorf("open %s stream to %s: %w", kind, nodeID, ErrNoLink)
	}
	qs, err := l.conn.OpenStreamSync(ctx)
	if err != nil && ctx.Err() == nil {
		// The link ended before anything was sent on the stream
		// (OpenStreamSync fails only with ctx or the connection): retire
		// it (the loss is reported, routes are the table's) and take the
		// peer's next link.
		cause := endCause(l, err)
		m.linkLost(l, cause)
		wctx := ctx
		if !restarted(cause) && !staleLink(cause) {
			// Only a link already up is worth taking.
			c, cancel := context.WithCancel(ctx)
			cancel()
			wctx = c
		} else {
			c, cancel := context.WithTimeout(ctx, m.restartWait)
			defer cancel()
			wctx = c
		}
		if nl, nqs, rerr := m.reopen(wctx, nodeID, l); rerr == nil {
			// Opened on the next link: nothing was sent on the first,
			// so nothing is sent again (counted as opened, not replayed).
			l, qs, err = nl, nqs, nil
		}
	}
	if err != nil {
		m.met.stream(kind, resultError)
		return nil, fmt.Errorf("open %s stream to %s: %w", kind, nodeID, err)
	}
	// The kind byte leaves with the caller's first write: a request is
	// then one packet, not a packet for the kind and one for the rest.
	m.met.stream(kind, resultOpened)
	return newOpenedStream(m, nodeID, l, qs, kind), nil
}
