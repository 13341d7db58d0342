package tlspool

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mux"
)

// Defaults of Config's zero fields.
const (
	DefaultMaxConnsPerPeer  = 64
	DefaultMaxIdlePerPeer   = 8
	DefaultIdleTimeout      = 30 * time.Second
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultSharedPerPeer and DefaultStreamsPerShared are
	// Config.SharedPerPeer and Config.StreamsPerShared when 0.
	DefaultSharedPerPeer    = 2
	DefaultStreamsPerShared = 32
	// DefaultSharedAfter is Config.SharedAfter when 0.
	DefaultSharedAfter = 1
	// MaxConnsLimit caps MaxConnsPerPeer and MaxIdlePerPeer.
	MaxConnsLimit = 4096
)

// admitted is the byte a server writes once it admitted a client: in TLS
// 1.3 the client's handshake completes before the server has checked the
// client's certificate, so a dial waits for it.
const admitted = 0x01

var (
	// ErrPoolFull is returned by Get when the peer has MaxConnsPerPeer
	// connections already.
	ErrPoolFull = errors.New("tlspool: connections to the peer at their limit")
	// ErrKeyMismatch is a peer whose certificate key is not the pinned one.
	ErrKeyMismatch = errors.New("tlspool: peer key is not the pinned key")
	// ErrNotAdmitted is a server that closed the connection instead of
	// confirming the client's admission.
	ErrNotAdmitted = errors.New("tlspool: the server did not admit this node")
	// ErrClosed is returned by Get once the pool is closed.
	ErrClosed = errors.New("tlspool: pool closed")
	// ErrDialing is returned by Get when no connection is idle and
	// MaxDialsPerPeer dials to the peer are in progress.
	ErrDialing = errors.New("tlspool: dials to the peer at their limit")
	// ErrALPN is a server that did not select the pool's protocol.
	ErrALPN = errors.New("tlspool: the server does not speak the protocol")
)

// Config configures a Pool.
type Config struct {
	// Certificate is this node's certificate (identity.TLSCertificate):
	// an Ed25519 key; required.
	Certificate tls.Certificate
	// MaxConnsPerPeer bounds the connections to one peer key, in use and
	// idle (0: DefaultMaxConnsPerPeer).
	MaxConnsPerPeer int
	// MaxIdlePerPeer bounds the idle connections kept per peer key (0:
	// DefaultMaxIdlePerPeer); more are closed on Put.
	MaxIdlePerPeer int
	// IdleTimeout is how long an idle connection is kept (0:
	// DefaultIdleTimeout).
	IdleTimeout time.Duration
	// HandshakeTimeout bounds a dial, handshake and admission (0:
	// DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// Now is the clock of idle expiry (nil: time.Now).
	Now func() time.Time
	// PeekAfter is how long a connection must have been idle before Get
	// peeks whether its peer closed it (0: always). A connection put back
	// a moment ago is taken as it is: a peer that closed it in that
	// moment fails the exchange on it, as one that dies during it does.
	PeekAfter time.Duration
	// MaxDialsPerPeer, when positive, bounds the dials to one peer in
	// progress at once: past it Get fails with ErrDialing at once (a
	// burst of requests need not make as many handshakes).
	MaxDialsPerPeer int
	// ALPN, when set, is the one application protocol offered; a server
	// that does not select it fails the dial (ErrALPN), so a peer that
	// speaks another protocol on the port is never sent a byte of it.
	ALPN string
	// MuxALPN, when set, is offered before ALPN: a server that selects
	// it carries every exchange with this pool as a stream of a
	// connection shared with others (internal/mux), where one that
	// selects ALPN gets a connection for each exchange in flight.
	MuxALPN string
	// Mux configures the shared connections' streams (zero fields:
	// mux's defaults). The server's must be the same.
	Mux mux.Config
	// SharedPerPeer bounds the shared connections to one peer (0:
	// DefaultSharedPerPeer), and StreamsPerShared is how many exchanges
	// one carries before another is dialed beside it (0:
	// DefaultStreamsPerShared); once there are SharedPerPeer, the least
	// busy takes more, up to Mux.MaxStreams. MaxConnsPerPeer bounds the
	// exchanges in flight to a peer either way.
	SharedPerPeer, StreamsPerShared int
	// SharedAfter is how many exchanges in flight to a peer get a
	// connection each before the next go as streams of shared
	// connections (0: DefaultSharedAfter): at one at a time, an exchange
	// on a connection of its own is the cheapest there is (its answer
	// wakes the goroutine waiting for it, no other), where under load
	// the shared connections' writes coalesce. Negative: none, every
	// exchange goes as a stream.
	SharedAfter int
}

func (c Config) withDefaults() Config {
	if c.MaxConnsPerPeer == 0 {
		c.MaxConnsPerPeer = DefaultMaxConnsPerPeer
	}
	if c.MaxIdlePerPeer == 0 {
		c.MaxIdlePerPeer = DefaultMaxIdlePerPeer
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.SharedPerPeer == 0 {
		c.SharedPerPeer = DefaultSharedPerPeer
	}
	if c.StreamsPerShared == 0 {
		c.StreamsPerShared = DefaultStreamsPerShared
	}
	if c.SharedAfter == 0 {
		c.SharedAfter = DefaultSharedAfter
	}
	return c
}

// validate reports every problem of c (defaults applied) at once.
func (c Config) validate() error {
	var errs []error
	if _, ok := c.Certificate.PrivateKey.(ed25519.PrivateKey); !ok || len(c.Certificate.Certificate) == 0 {
		errs = append(errs, errors.New("certificate: want an Ed25519 certificate and key"))
	}
	if c.MaxConnsPerPeer < 1 || c.MaxConnsPerPeer > MaxConnsLimit {
		errs = append(errs, fmt.Errorf("max conns per peer %d: want 1..%d", c.MaxConnsPerPeer, MaxConnsLimit))
	}
	if c.MaxIdlePerPeer < 1 || c.MaxIdlePerPeer > c.MaxConnsPerPeer {
		errs = append(errs, fmt.Errorf("max idle per peer %d: want 1..%d (max conns per peer)", c.MaxIdlePerPeer, c.MaxConnsPerPeer))
	}
	if c.MaxDialsPerPeer < 0 || c.MaxDialsPerPeer > c.MaxConnsPerPeer {
		errs = append(errs, fmt.Errorf("max dials per peer %d: want 0..%d (max conns per peer)", c.MaxDialsPerPeer, c.MaxConnsPerPeer))
	}
	if c.IdleTimeout < 0 || c.HandshakeTimeout < 0 || c.PeekAfter < 0 {
		errs = append(errs, errors.New("timeouts must not be negative"))
	}
	if c.SharedPerPeer < 1 || c.SharedPerPeer > 64 || c.StreamsPerShared < 1 || c.StreamsPerShared > MaxConnsLimit ||
		c.SharedAfter > MaxConnsLimit {
		errs = append(errs, fmt.Errorf("shared per peer %d, streams per shared %d, shared after %d: want 1..64, 1..%d and at most %d",
			c.SharedPerPeer, c.StreamsPerShared, c.SharedAfter, MaxConnsLimit, MaxConnsLimit))
	}
	if c.MuxALPN != "" && (c.ALPN == "" || c.MuxALPN == c.ALPN) {
		errs = append(errs, errors.New("mux alpn: wants an alpn of its own beside alpn"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tlspool: %w", err)
	}
	return nil
}

// Stats are a pool's counts so far.
type Stats struct {
	// Dead counts idle connections found closed by their peer: by the
	// peek when taken, or after (Stale).
	Dials, DialFailures, Reuses, Expired, Dead int64
	// Open and Idle are the connections now, in use and idle, and idle;
	// an exchange on a shared connection counts as one in use. Shared
	// are the shared connections open.
	Open, Idle, Shared int
}

// Pool keeps TLS connections to peers for reuse.
type Pool struct {
	cfg Config
	// epoch is when the pool was made, by cfg.Now or, without one,
	// time.Now: idle times are read as durations since it (clock), so
	// that without a Now each is one read of the monotonic clock, not
	// the two of time.Now (monotonic and wall), twice a request.
	epoch time.Time

	mu     sync.Mutex // guards peers, stats, closed
	peers  map[string]*peerConns
	stats  Stats
	closed bool
}

// peerConns are one peer key's connections.
type peerConns struct {
	open    int     // in use and idle, and dials in progress
	dialing int     // dials in progress
	idle    []*Conn // most recently put last
	// inUse are the connections handed out, each at its index (Conn.slot),
	// for ClosePeer to abort: a slice, not a set, so that Get and Put
	// add and remove one without hashing.
	inUse []*Conn
	// shared are the peer's shared connections (a server that speaks
	// MuxALPN), and idleStreams their streams kept for reuse (most
	// recently put last): a stream carries one exchange after another,
	// as a connection of its own does.
	shared      []*sharedConn
	idleStreams []*Conn
}

// takeLocked adds c to pc's connections in use. The pool's mu must be
// held.
func (pc *peerConns) takeLocked(c *Conn) {
	c.slot = len(pc.inUse)
	pc.inUse = append(pc.inUse, c)
}

// releaseLocked removes c from pc's connections in use, if it is one,
// moving the last one into its slot. The pool's mu must be held.
func (pc *peerConns) releaseLocked(c *Conn) {
	i := c.slot
	if i < 0 {
		return
	}
	last := len(pc.inUse) - 1
	pc.inUse[i] = pc.inUse[last]
	pc.inUse[i].slot = i
	pc.inUse[last] = nil
	pc.inUse = pc.inUse[:last]
	c.slot = -1
}

// Conn is one pooled connection: a *tls.Conn with its peer's key. Give it
// back with Pool.Put after a complete exchange, or Close it after any
// failure.
type Conn struct {
	// Conn is the TLS connection, or the stream of a shared one.
	net.Conn
	tc *tls.Conn // the TLS connection (the shared one, for a stream)
	// st and sc are the stream and the connection it is on, for an
	// exchange on a shared connection; nil for a connection of its own.
	st        *mux.Stream
	sc        *sharedConn
	key       string        // the peer's key, as the pool's map key
	idleSince time.Duration // since the pool's epoch
	// placed is whether c holds a place among its key's connections
	// (guarded by the pool's mu): ClosePeer gives up every place at once.
	placed bool
	// pc are the connections c holds its place among, and slot its index
	// in pc.inUse (-1 when not in use), both guarded by the pool's mu. A
	// placed connection in use has its pc in the pool's map: only
	// ClosePeer takes a pc out while it has places, and it unplaces them.
	pc        *peerConns
	slot      int
	pool      *Pool
	closeOnce sync.Once
	// unchecked: Get took c from the idle ones without a peek.
	unchecked bool
}

// Unchecked reports whether Get handed c out from the idle connections
// without a peek (idle less than PeekAfter): its peer may have closed it
// in that moment. An exchange on it that fails before anything of the
// answer came may be sent again on another connection (Stale).
func (c *Conn) Unchecked() bool { return c.unchecked }

// Alive peeks whether c's peer has not closed it (a system call).
//
// A stream's shared connection is probed instead (mux.Session.Probe): a
// read of at most streamProbeWait when no other goroutine is reading it,
// the only way to see that a peer whose streams were all idle went away.
func (c *Conn) Alive() bool {
	if c.st != nil {
		return c.st.Alive() && c.sc.s.Probe(streamProbeWait)
	}
	return httpfast.ConnAlive(c.tc.NetConn())
}

// streamProbeWait bounds a probe of a live shared connection with nothing
// to read (a peer that went away has its end there at once).
const streamProbeWait = 100 * time.Microsecond

// NetConn is the socket under c's TLS connection; for a stream of a
// shared connection, the stream itself (its deadlines and close are the
// stream's, not the socket's, which the other streams share).
func (c *Conn) NetConn() net.Conn {
	if c.st != nil {
		return c.st
	}
	return c.tc.NetConn()
}

// ConnectionState is the TLS connection's state.
func (c *Conn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// Shared reports whether c is a stream of a shared connection.
func (c *Conn) Shared() bool { return c.st != nil }

// Close closes the connection and frees its place in the pool.
func (c *Conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		err = c.Conn.Close() // a stream's resets the stream, not the connection
		if c.pool != nil {
			if sc := c.pool.forget(c); sc != nil {
				sc.close()
			}
		}
	})
	return err
}

// Abort closes the connection's socket at once, without the TLS
// close_notify that Close sends (which waits on a write in progress), and
// frees its place in the pool: a Read or Write blocked on it returns. It
// may be called from any goroutine.
func (c *Conn) Abort() {
	_ = c.NetConn().Close() // a stream's Close resets it at once
	_ = c.Close()
}

// NewPool validates cfg and returns an empty pool; it starts nothing.
func NewPool(cfg Config) (*Pool, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Pool{cfg: cfg, peers: make(map[string]*peerConns)}
	if cfg.Now != nil {
		p.epoch = cfg.Now()
	} else {
		p.epoch = time.Now()
	}
	return p, nil
}

// clock is the time since the pool's epoch, by Config.Now when set.
func (p *Pool) clock() time.Duration {
	if p.cfg.Now != nil {
		return p.cfg.Now().Sub(p.epoch)
	}
	return time.Since(p.epoch)
}

// Get returns an idle connection to the peer with key, or dials addr
// (host:port) for a new one: TLS 1.3, this node's certificate, the
// server's key checked against key, and the server's admission awaited.
func (p *Pool) Get(ctx context.Context, addr string, key ed25519.PublicKey) (*Conn, error) {
	if len(key) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("tlspool: pinned key of %d bytes", len(key))
	}
	var stale []*Conn
	var pc *peerConns
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			closeAll(stale)
			return nil, ErrClosed
		}
		// Indexed with the conversion in place: the lookup of a known
		// peer, every request's, makes no string of the key.
		if pc = p.peers[string(key)]; pc == nil {
			pc = &peerConns{}
			p.peers[string(key)] = pc
		}
		c, peek := p.takeIdleLocked(pc, &stale)
		if c == nil && p.cfg.MuxALPN != "" && pc.open-len(stale) >= p.cfg.SharedAfter {
			var dead *sharedConn
			c, dead = p.openStreamLocked(pc)
			if dead != nil {
				p.mu.Unlock()
				dead.close()
				continue // the loop takes p.mu again
			}
		}
		if c == nil {
			break // p.mu held
		}
		p.mu.Unlock()
		// The peek is a system call: the pool's lock is not held for it
		// (the connection is in use meanwhile, so no one else takes it).
		if !peek || c.Alive() {
			c.unchecked = !peek
			closeAll(stale)
			return c, nil
		}
		// The peer closed it while it was idle (a restart, its idle
		// timeout): reusing it would fail the next request.
		p.mu.Lock()
		p.stats.Reuses--
		p.stats.Dead++
		p.mu.Unlock()
		if c.sc != nil {
			c.sc.close() // its other streams are as dead; they fail at once
		}
		stale = append(stale, c)
	}
	if pc.open-len(stale) >= p.cfg.MaxConnsPerPeer {
		p.mu.Unlock()
		closeAll(stale)
		return nil, ErrPoolFull
	}
	if p.cfg.MaxDialsPerPeer > 0 && pc.dialing >= p.cfg.MaxDialsPerPeer {
		p.mu.Unlock()
		closeAll(stale)
		return nil, ErrDialing
	}
	// A peer's first SharedAfter exchanges in flight get a connection
	// each; past them, a dial is for a shared connection.
	shared := p.cfg.MuxALPN != "" && pc.open-len(stale) >= p.cfg.SharedAfter
	pc.open++ // the place of the dial
	pc.dialing++
	p.stats.Dials++
	p.mu.Unlock()
	closeAll(stale)

	k := string(key)
	c, err := p.dial(ctx, addr, key, shared)
	p.mu.Lock()
	pc.dialing--
	p.mu.Unlock()
	if err != nil {
		p.mu.Lock()
		p.stats.DialFailures++
		p.mu.Unlock()
		p.forgetPlace(k, pc)
		return nil, err
	}
	c.key, c.pool = k, p
	if c.sc != nil {
		c.sc.key = k
	}
	p.mu.Lock()
	if p.peers[k] == pc && !p.closed {
		c.placed, c.pc = true, pc
		pc.takeLocked(c)
		if c.sc != nil {
			pc.shared = append(pc.shared, c.sc)
		}
		p.mu.Unlock()
		return c, nil
	}
	// ClosePeer or Close came during the dial.
	p.mu.Unlock()
	c.Abort()
	if c.sc != nil {
		c.sc.close()
	}
	return nil, fmt.Errorf("tlspool: dial %s: %w", addr, ErrClosed)
}

// takeIdleLocked takes pc's most recently put idle connection, moving
// the expired ones it passes to stale, and says whether it is to be
// peeked; nil when none is left. p.mu must be held.
func (p *Pool) takeIdleLocked(pc *peerConns, stale *[]*Conn) (c *Conn, peek bool) {
	now := p.clock()
	// The oldest idle streams first: connections of their own are taken
	// before streams, so that idle streams would otherwise outlive
	// IdleTimeout unseen while a connection of its own serves.
	for len(pc.idleStreams) > 0 && (now-pc.idleStreams[0].idleSince >= p.cfg.IdleTimeout || !pc.idleStreams[0].st.Alive()) {
		*stale = append(*stale, pc.idleStreams[0])
		pc.idleStreams[0] = nil
		pc.idleStreams = pc.idleStreams[1:]
		p.stats.Expired++
	}
	if c, peek = p.takeIdleOfLocked(&pc.idle, pc, stale, now); c == nil {
		c, peek = p.takeIdleOfLocked(&pc.idleStreams, pc, stale, now)
	}
	return c, peek
}

// takeIdleOfLocked is takeIdleLocked on one of pc's idle lists.
func (p *Pool) takeIdleOfLocked(idle *[]*Conn, pc *peerConns, stale *[]*Conn, now time.Duration) (c *Conn, peek bool) {
	for len(*idle) > 0 {
		c := (*idle)[len(*idle)-1]
		*idle = (*idle)[:len(*idle)-1]
		if now-c.idleSince >= p.cfg.IdleTimeout || (c.st != nil && !c.st.Alive()) {
			*stale = append(*stale, c)
			p.stats.Expired++
			continue
		}
		pc.takeLocked(c)
		p.stats.Reuses++ // taken back by Get if the peek finds it dead
		return c, now-c.idleSince >= p.cfg.PeekAfter
	}
	return nil, false
}

func closeAll(cs []*Conn) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// forget frees c's place among its key's connections. For a stream, it
// returns its shared connection when that is to close now.
func (p *Pool) forget(c *Conn) (closeShared *sharedConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !c.placed {
		return nil // its place was given up by ClosePeer
	}
	// c.pc, not the map's: an idle connection taken out to be closed
	// (expired, Stale, CloseIdle) keeps its place until it is, and a
	// ClosePeer meanwhile may have made its key's connections others.
	pc := c.pc
	c.placed = false
	pc.releaseLocked(c)
	pc.open--
	if c.sc != nil {
		closeShared = p.streamEndedLocked(c, pc)
	}
	if pc.open <= 0 && len(pc.idle) == 0 && len(pc.idleStreams) == 0 && len(pc.shared) == 0 && p.peers[c.key] == pc {
		delete(p.peers, c.key)
	}
	return closeShared
}

// forgetPlace frees the place of a dial to k that failed in pc, the
// connections it was counted among: after a ClosePeer during the dial, k's
// connections in the map are others, which its place never was.
func (p *Pool) forgetPlace(k string, pc *peerConns) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc.open--; pc.open <= 0 && len(pc.idle) == 0 && len(pc.inUse) == 0 && len(pc.shared) == 0 && p.peers[k] == pc {
		delete(p.peers, k)
	}
}

// dial dials addr for a connection of its own, or with shared for a
// shared connection (when the server speaks MuxALPN; one that does not
// makes it a connection of its own).
func (p *Pool) dial(ctx context.Context, addr string, key ed25519.PublicKey, shared bool) (*Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.HandshakeTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tlspool: dial %s: %w", addr, err)
	}
	var protos []string
	if shared {
		protos = append(protos, p.cfg.MuxALPN)
	}
	if p.cfg.ALPN != "" {
		protos = append(protos, p.cfg.ALPN)
	}
	raw = httpfast.RawIO(raw)
	tc := tls.Client(raw, &tls.Config{
		MinVersion:         tls.VersionTLS13,
		NextProtos:         protos,
		Certificates:       []tls.Certificate{p.cfg.Certificate},
		InsecureSkipVerify: true, // VerifyPeerCertificate checks the pinned key
		ServerName:         "nodeld",
		VerifyPeerCertificate: func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
			got, err := identity.PeerKey(rawCerts)
			if err != nil {
				return err
			}
			if !got.Equal(key) {
				return ErrKeyMismatch
			}
			return nil
		},
	})
	// The context bounds the handshake and the admission byte.
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		if errors.Is(err, ErrKeyMismatch) {
			return nil, fmt.Errorf("tlspool: %s: %w", addr, ErrKeyMismatch)
		}
		return nil, fmt.Errorf("tlspool: handshake with %s: %w", addr, err)
	}
	proto := tc.ConnectionState().NegotiatedProtocol
	shared = shared && proto == p.cfg.MuxALPN
	if p.cfg.ALPN != "" && proto != p.cfg.ALPN && !shared {
		_ = raw.Close()
		return nil, fmt.Errorf("tlspool: %s: %w", addr, ErrALPN)
	}
	var b [1]byte
	if _, err := io.ReadFull(tc, b[:]); err != nil || b[0] != admitted {
		_ = raw.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("tlspool: admission by %s: %w", addr, context.Cause(ctx))
		}
		return nil, fmt.Errorf("tlspool: %s: %w", addr, ErrNotAdmitted)
	}
	if !stop() {
		// The deadline was set as the read returned: the connection
		// cannot be trusted to be usable.
		_ = raw.Close()
		return nil, fmt.Errorf("tlspool: admission by %s: %w", addr, context.Cause(ctx))
	}
	if shared {
		return p.newShared(tc, raw)
	}
	return &Conn{Conn: tc, tc: tc, slot: -1}, nil
}

// Put gives back a connection after a complete exchange (nothing unread,
// nothing half-written) for reuse; it is closed instead when the pool
// keeps MaxIdlePerPeer idle connections of its peer already or is closed.
func (p *Pool) Put(c *Conn) {
	if c.pool != p {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	pc := c.pc
	if !c.placed {
		// ClosePeer came while it was in use: c.pc may be gone.
		pc = p.peers[c.key]
	}
	var idle *[]*Conn
	if pc != nil {
		idle = &pc.idle
		if c.st != nil {
			idle = &pc.idleStreams
		}
	}
	if p.closed || pc == nil || len(*idle) >= p.cfg.MaxIdlePerPeer || (c.st != nil && !c.st.Alive()) {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	if !c.placed {
		// ClosePeer came while it was in use.
		p.mu.Unlock()
		c.Abort()
		return
	}
	pc.releaseLocked(c)
	c.idleSince = p.clock()
	*idle = append(*idle, c)
	p.mu.Unlock()
}

// Stale is c, handed out unchecked, found closed by its peer (an exchange
// on it failed before anything of the answer came, or Alive said so): it
// counts as Dead, is aborted, and every idle connection to the same peer
// is closed too (each was put back before c failed, and is as likely
// closed: a peer that restarted closed them all). It returns how many
// idle connections it closed.
func (p *Pool) Stale(c *Conn) int {
	p.mu.Lock()
	p.stats.Dead++
	var idle []*Conn
	var shared []*sharedConn
	if pc := p.peers[c.key]; pc != nil && c.pool == p {
		idle, pc.idle = pc.idle, nil
		idle, pc.idleStreams = append(idle, pc.idleStreams...), nil
		if c.sc != nil {
			// The shared connection the exchange failed on: the others
			// were in use a moment ago, or are idle too and as likely
			// closed by a peer that restarted.
			shared, pc.shared = pc.shared, nil
		}
	}
	p.mu.Unlock()
	c.Abort()
	closeAll(idle)
	for _, sc := range shared {
		sc.close()
	}
	return len(idle) + len(shared)
}

// ClosePeer aborts every connection to the peer with key, idle and in
// use (Conn.Abort: an exchange on one fails at once), as when the peer is
// known dead or removed; a dial in progress fails when it completes.
func (p *Pool) ClosePeer(key ed25519.PublicKey) int {
	p.mu.Lock()
	pc := p.peers[string(key)]
	if pc == nil {
		p.mu.Unlock()
		return 0
	}
	delete(p.peers, string(key))
	all := append(append(append([]*Conn(nil), pc.idle...), pc.idleStreams...), pc.inUse...)
	for _, c := range all {
		c.placed, c.pc, c.slot = false, nil, -1
	}
	shared := pc.shared
	pc.shared = nil
	p.mu.Unlock()
	for _, c := range all {
		c.Abort()
	}
	for _, sc := range shared {
		sc.close()
	}
	return len(all) + len(shared)
}

// Stats returns the pool's counts.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	for _, pc := range p.peers {
		s.Open += pc.open
		s.Idle += len(pc.idle) + len(pc.idleStreams)
		s.Shared += len(pc.shared)
	}
	return s
}

// CloseIdle closes every idle connection.
func (p *Pool) CloseIdle() {
	p.mu.Lock()
	var idle []*Conn
	for _, pc := range p.peers {
		idle = append(append(idle, pc.idle...), pc.idleStreams...)
		pc.idle, pc.idleStreams = nil, nil
	}
	p.mu.Unlock()
	closeAll(idle) // a shared connection closes with its last stream
}

// Close closes the idle connections and makes Get fail from now on;
// connections in use are closed when they are put back.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.CloseIdle()
}
