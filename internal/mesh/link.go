package mesh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/quic-go/quic-go"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/table"
)

// links is the link set: one link per peer, dialed (dialLoop) or
// accepted (acceptLoop) and admitted in the handshake, adopted or
// refused as a duplicate, replaced by a peer's new run, lost and waited
// for (linkLost, expireRestart); and the streams this node opens on them
// (open, awaitLink, reopen). The links live in the peerSet, under its
// lock; what happens to them is reported as events.
type links struct {
	ps      *peerSet
	adm     *admission
	streams *streamServer
	adv     *advertiser
	live    liveness
	events  *eventQueue
	ident   *identity.Identity
	met     *metrics
	log     *zap.Logger
	now     func() time.Time
	rand    func() float64
	// restartWait is RestartLinkWait or Deps.RestartLinkWait.
	restartWait time.Duration
	onLinkUp    func(ctx context.Context, peer PeerInfo)
}

func (ls *links) acceptLoop(ctx context.Context, ln *quic.Listener) {
	for {
		conn, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		ls.adopt(conn, nil)
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
func (ls *links) adopt(conn *quic.Conn, dialed *peerEntry) bool {
	key := connKey(conn)
	ls.ps.mu.Lock()
	p := dialed
	if p == nil && key != nil {
		p = ls.ps.peerByKeyLocked(key)
	}
	ls.met.bytes.track(conn)
	if ls.ps.closing || p == nil || key == nil || ls.ps.peers[p.cfg.Addr] != p || !p.key.Equal(key) {
		ls.ps.mu.Unlock()
		_ = conn.CloseWithError(CodeNotAdmitted, "not admitted")
		ls.met.bytes.retire(conn)
		return false
	}
	now := ls.now()
	self := ls.ident.ID()
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
		ls.drainLocked(conn)
		ls.serveDrainingLocked(loser)
		ls.ps.mu.Unlock()
		ls.met.handshakes.WithLabelValues(handshakeOK).Inc()
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
			ls.drainLocked(old.conn)
			old = nil
		}
	}
	p.link = l
	p.state = StateConnected
	p.lastErr = ""
	p.resetAt = time.Time{}
	p.awayAt = time.Time{}
	ls.ps.linkChangedLocked()
	ls.events.emit(queuedEvent{ev: table.PeerEvent{Kind: table.PeerLinkUp, Node: p.id}})
	ls.ps.updateGaugeLocked()
	ls.ps.wg.Go(func() { ls.serveLink(l) })
	ls.ps.wg.Go(func() { ls.adv.sender(l) })
	liveness := ls.ps.cfg.livenessTimeout()
	ls.ps.wg.Go(func() { ls.live.watch(l, liveness) })
	if ls.onLinkUp != nil && ls.ps.runCtx != nil {
		runCtx, info := ls.ps.runCtx, ls.ps.peerInfoLocked(p)
		ls.ps.wg.Go(func() { ls.linkUpHook(runCtx, l, info) })
	}
	ls.ps.mu.Unlock()

	ls.met.handshakes.WithLabelValues(handshakeOK).Inc()
	switch {
	case old != nil && stale:
		_ = old.conn.CloseWithError(CodeStale, "peer restarted")
	case old != nil:
		_ = old.conn.CloseWithError(CodeDuplicate, "duplicate link")
	}
	ls.log.Info("peer link up", zap.String("peer", l.peerID), zap.Stringer("addr", conn.RemoteAddr()),
		zap.Bool("outbound", l.outbound))
	l.poke()
	return true
}

// linkUpHook calls OnLinkUp for l with a context that ends when l stops
// being its peer's link or the mesh stops.
func (ls *links) linkUpHook(runCtx context.Context, l *link, info PeerInfo) {
	ctx, cancel := context.WithCancel(runCtx)
	defer cancel()
	ls.ps.wg.Go(func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	})
	ls.onLinkUp(ctx, info)
}

// drainLocked closes a duplicate connection after DuplicateDrain, or at
// once when the mesh stops. Streams opened on it while both sides settled
// on the other link finish meanwhile; new ones go to the link. Run waits
// for the goroutine. peerSet.mu must be held.
func (ls *links) drainLocked(conn *quic.Conn) {
	runCtx := ls.ps.runCtx
	if runCtx == nil {
		_ = conn.CloseWithError(CodeDuplicate, "duplicate link")
		ls.met.bytes.retire(conn)
		return
	}
	ls.ps.wg.Go(func() {
		t := time.NewTimer(DuplicateDrain)
		defer t.Stop()
		select {
		case <-t.C:
		case <-runCtx.Done():
		case <-conn.Context().Done():
		}
		_ = conn.CloseWithError(CodeDuplicate, "duplicate link")
		ls.met.bytes.retire(conn)
	})
}

// serveDrainingLocked serves the streams the peer opens on l, a link that
// lost a simultaneous dial and drains, until its connection ends: the
// peer may not have learned yet that the other link won. peerSet.mu is held.
func (ls *links) serveDrainingLocked(l *link) {
	runCtx := ls.ps.runCtx
	if runCtx == nil {
		return
	}
	ls.ps.wg.Go(func() {
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
			ls.streams.goServe(runCtx, func() { ls.streams.serveAccepted(ctx, l, s, cr) })
		}
	})
}

// serveLink accepts the link's streams until the connection ends, then
// retires the link.
func (ls *links) serveLink(l *link) {
	ls.ps.mu.Lock()
	runCtx := ls.ps.runCtx
	ls.ps.mu.Unlock()
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
		ls.streams.goServe(runCtx, func() { ls.streams.serveAccepted(ctx, l, s, cr) })
	}
	cancel()
	ls.met.bytes.retire(l.conn)
	ls.linkLost(l, endCause(l, acceptErr))
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
// whoever calls it (open does, for a link it finds ended).
// When the peer restarted (a stateless reset) or closed the link
// stopping (CodeShutdown: a `systemctl restart`, an upgrade) the mesh
// waits for its next link for at most the restart wait (see
// expireRestart): it holds requests to it meanwhile, and says so in the
// event (Wait), so that the table can keep the peer's routes for a
// request that nothing else serves: such a request had better wait for
// the new run than fail. A peer stopped for good costs it the rest of the
// wait before the same 503.
func (ls *links) linkLost(l *link, cause error) {
	ls.ps.mu.Lock()
	p := l.peer
	current := ls.ps.peers[p.cfg.Addr] == p && p.link == l
	keep := false
	if current {
		p.link = nil
		close(l.done)
		ls.ps.linkChangedLocked()
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
			keep = ls.ps.runCtx != nil && !ls.ps.closing
		}
		if keep {
			ev.until = p.awayAt.Add(ls.restartWait)
		}
		ls.events.emit(ev)
		ls.ps.updateGaugeLocked()
		if keep {
			runCtx, awayAt := ls.ps.runCtx, p.awayAt
			ls.ps.wg.Go(func() { ls.expireRestart(runCtx, p, awayAt) })
		}
	}
	ls.ps.mu.Unlock()
	if !current {
		return
	}
	ls.log.Info("peer link lost", zap.String("peer", l.peerID), zap.Bool("waiting_for_link", keep), zap.Error(cause))
}

// expireRestart ends the wait for p's next link, begun by linkLost when
// p's link ended at awayAt because p restarted or stopped, unless a new
// link to p came within the restart wait: it reports PeerWaitOver (the
// table drops the routes still waiting; a new link's first round ended
// the wait before, Table.Linked) and, for a peer that closed its link
// stopping, calls OnPeerStopped. The kept routes stop resolving at the
// end of the wait by themselves, so a round in flight is never raced. The
// mesh stopping ends the wait at once: no link will come.
func (ls *links) expireRestart(runCtx context.Context, p *peerEntry, awayAt time.Time) {
	t := time.NewTimer(ls.restartWait - time.Since(awayAt))
	defer t.Stop()
	select {
	case <-t.C:
	case <-runCtx.Done():
	}
	ls.ps.mu.Lock()
	id := p.id
	waiting := ls.ps.peers[p.cfg.Addr] == p && p.link == nil && p.awayAt.Equal(awayAt)
	// Closed for shutdown rather than reset by a new run (resetAt).
	stopped := waiting && p.resetAt.IsZero() && runCtx.Err() == nil
	if waiting {
		ls.events.emit(queuedEvent{ev: table.PeerEvent{Kind: table.PeerWaitOver, Node: id, Stopped: stopped}})
	}
	ls.ps.mu.Unlock()
	if !waiting {
		// Linked again (its first round ends the wait), restarted again
		// (its own expiry runs), or removed from the config (PeerRemoved
		// dropped the routes).
		return
	}
	ls.log.Info("peer did not link again within the restart wait",
		zap.String("peer", id), zap.Bool("stopped", stopped), zap.Duration("waited", ls.restartWait))
}

// dialLoop keeps p linked: it dials while p has no link, with capped
// exponential backoff and jitter between failures, and waits while it has
// one.
func (ls *links) dialLoop(ctx context.Context, p *peerEntry) {
	attempt := 0
	for {
		ls.ps.mu.Lock()
		l := p.link
		ls.ps.mu.Unlock()
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
			err := ls.dialOnce(ctx, p)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				continue
			}
		}
		if !sleepCtx(ctx, backoffDelay(attempt, ls.rand())) {
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
func (ls *links) dialOnce(ctx context.Context, p *peerEntry) error {
	ls.ps.mu.Lock()
	ap, addr, tr, qconf := p.ap, p.cfg.Addr, ls.ps.tr, ls.ps.quicConfigLocked()
	ls.ps.mu.Unlock()
	if !ap.IsValid() {
		resolved, err := resolveAddr(ctx, addr)
		if err != nil {
			ls.met.handshakes.WithLabelValues(handshakeError).Inc()
			ls.ps.setState(p, StateReconnecting, err.Error())
			return err
		}
		ap = resolved
		ls.ps.mu.Lock()
		p.ap = ap
		ls.ps.mu.Unlock()
	}
	refused := false
	dctx, cancel := context.WithTimeout(ctx, 2*HandshakeTimeout)
	defer cancel()
	conn, err := tr.Dial(dctx, net.UDPAddrFromAddrPort(ap), ls.adm.clientTLS(p, &refused), qconf)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		state := StateReconnecting
		if refused {
			state = StateRefused
		} else {
			ls.met.handshakes.WithLabelValues(handshakeError).Inc()
		}
		ls.ps.mu.Lock()
		if ls.ps.peers[p.cfg.Addr] == p && p.link == nil {
			p.state = state
			if !refused || p.lastErr == "" {
				p.lastErr = "dial: " + err.Error()
			}
			ls.ps.updateGaugeLocked()
		}
		ls.ps.mu.Unlock()
		ls.log.Debug("peer dial failed", zap.String("addr", addr), zap.Error(err))
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	ls.adopt(conn, p)
	ls.ps.mu.Lock()
	linked := p.link != nil
	ls.ps.mu.Unlock()
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

// open opens a stream of kind on the existing link to nodeID
// (Mesh.OpenStream). The kind byte is sent with the caller's first Write
// (or CloseWrite, Close), so a request written at once leaves with it. It never dials: without a
// live link it returns ErrNoLink, except that a peer whose link ended
// with a stateless reset (it restarted) less than RestartLinkWait ago is
// waited for, within ctx (ErrNoLink when the wait ends without a link).
// A link found ended when the stream is opened
// (nothing was sent on the stream) is retired, and the stream is opened on
// the peer's next link: at once when there is one, or once it comes up
// (within RestartLinkWait and ctx) when the old link ended as stale. That
// is choosing a link, not sending anything again; the loss is reported
// (PeerLinkLost) and open changes no route. A stream other than an
// inference stream whose link turns out to lead to a previous run of the
// peer is sent again on the new run's link when no run can have read it
// (see replay); an inference stream fails instead, and the proxy, which
// owns a forward's retry, sends it again (PeerRestarted). The caller owns
// the stream and must end it (Close, CloseWrite or Reset).
func (ls *links) open(ctx context.Context, nodeID string, kind StreamKind) (*Stream, error) {
	if kind == KindAdvert || kind.String() == "unknown" {
		return nil, fmt.Errorf("open stream of kind %d: not a handler kind", kind)
	}
	ls.ps.mu.Lock()
	var l *link
	var wait time.Duration
	if p := ls.ps.peerByIDLocked(nodeID); p != nil {
		l = p.link
		switch {
		case l != nil:
		case !p.resetAt.IsZero():
			wait = ls.restartWait - time.Since(p.resetAt)
		case kind == KindInfer && !p.awayAt.IsZero():
			// A peer that closed its link stopping: only a request
			// waits for its return (its routes are kept for that), a
			// control call or a fetch fails at once as before.
			wait = ls.restartWait - time.Since(p.awayAt)
		}
	}
	ls.ps.mu.Unlock()
	if l == nil && wait > 0 {
		// The peer restarted a moment ago: its new run is linking.
		wctx, cancel := context.WithTimeout(ctx, wait)
		l, _ = ls.awaitLink(wctx, nodeID, nil)
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
		ls.linkLost(l, cause)
		wctx := ctx
		if !restarted(cause) && !staleLink(cause) {
			// Only a link already up is worth taking.
			c, cancel := context.WithCancel(ctx)
			cancel()
			wctx = c
		} else {
			c, cancel := context.WithTimeout(ctx, ls.restartWait)
			defer cancel()
			wctx = c
		}
		if nl, nqs, rerr := ls.reopen(wctx, nodeID, l); rerr == nil {
			// Opened on the next link: nothing was sent on the first,
			// so nothing is sent again (counted as opened, not replayed).
			l, qs, err = nl, nqs, nil
		}
	}
	if err != nil {
		ls.met.stream(kind, resultError)
		return nil, fmt.Errorf("open %s stream to %s: %w", kind, nodeID, err)
	}
	// The kind byte leaves with the caller's first write: a request is
	// then one packet, not a packet for the kind and one for the rest.
	ls.met.stream(kind, resultOpened)
	return newOpenedStream(ls, nodeID, l, qs, kind), nil
}

// reopen opens a stream on a live link to nodeID other than old, waiting
// for one until ctx ends.
func (ls *links) reopen(ctx context.Context, nodeID string, old *link) (*link, *quic.Stream, error) {
	l, err := ls.awaitLink(ctx, nodeID, old)
	if err != nil {
		return nil, nil, err
	}
	qs, err := l.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, nil, err
	}
	return l, qs, nil
}

// awaitLink returns nodeID's link once it is live and not old, waiting for
// one until ctx ends. A link whose connection has ended is retired on the
// way, rather than when its accept loop gets to it.
func (ls *links) awaitLink(ctx context.Context, nodeID string, old *link) (*link, error) {
	for {
		ls.ps.mu.Lock()
		p := ls.ps.peerByIDLocked(nodeID)
		if p == nil || ls.ps.closing {
			ls.ps.mu.Unlock()
			return nil, fmt.Errorf("%s: %w", nodeID, ErrNoLink)
		}
		l, ev := p.link, ls.ps.linkEvent
		ls.ps.mu.Unlock()
		if l != nil {
			if cerr := l.conn.Context().Err(); cerr != nil {
				ls.linkLost(l, context.Cause(l.conn.Context()))
				continue
			}
			if l != old {
				return l, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a new link to %s: %w (%w)", nodeID, ErrNoLink, ctx.Err())
		case <-ev:
		}
	}
}

// startDialLocked starts p's dial loop while Run runs.
func (ls *links) startDialLocked(p *peerEntry) {
	if ls.ps.runCtx == nil || ls.ps.closing || p.stop != nil {
		return
	}
	ctx, stop := context.WithCancel(ls.ps.runCtx)
	p.stop = stop
	ls.ps.wg.Go(func() { ls.dialLoop(ctx, p) })
}
