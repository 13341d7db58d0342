package meshproxy

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/table"
	"github.com/nodeld/nodeld/internal/tlspool"
)

// Transports of inference streams (mesh.infer_transport).
const (
	// TransportTCP carries inference over pinned TLS 1.3 connections on
	// TCP, pooled, beside QUIC; QUIC is the fallback.
	TransportTCP = "tcp"
	// TransportQUIC carries inference on QUIC streams of the mesh link.
	TransportQUIC = "quic"
)

// InferALPN is the application protocol of inference over TLS/TCP: the
// KindInfer exchange (head, body frames, end frame; then the answer's
// frames to its end frame or a refusal), one exchange after another on a
// connection.
const InferALPN = "nodeld-infer/1"

// InferMuxALPN is the protocol of the same exchanges carried as streams
// of connections shared between two nodes (internal/mux): a consumer
// offers it first, and a serving node that speaks it selects it; either
// side that does not gets InferALPN, a connection for each exchange in
// flight.
const InferMuxALPN = "nodeld-infer-mux/1"

// Bounds of inference over TLS/TCP.
const (
	// TCPDialTimeout bounds a dial, TLS handshake and admission; a peer
	// that does not answer in time is reached over QUIC.
	TCPDialTimeout = 2 * time.Second
	// TCPRetryAfter is how long a peer whose dial failed is reached over
	// QUIC only (a new link from it ends the wait).
	TCPRetryAfter = 5 * time.Second
	// TCPServerIdleTimeout closes a served connection idle this long,
	// longer than the pool's tlspool.DefaultIdleTimeout so that the
	// consumer, not the server, ends an idle connection (a request never
	// meets a connection the server is closing).
	TCPServerIdleTimeout = 3 * tlspool.DefaultIdleTimeout
	// TCPMaxIdlePerPeer bounds the idle connections kept per peer.
	TCPMaxIdlePerPeer = 64
	// TCPMaxConnsPerPeer bounds the connections to one peer, as many as
	// the requests a peer may serve at once (MaxMeshInflight); past it a
	// request goes over QUIC.
	TCPMaxConnsPerPeer = MaxMeshInflight
	// TCPMaxServerConns bounds the connections a node serves at once.
	TCPMaxServerConns = MaxMeshInflight
	// TCPWatchDelay is how long an exchange runs after its request was
	// read before its connection is watched for the consumer going away
	// (a short exchange needs no watcher); the watch starts within
	// TCPWatchDelay/2 after that (watchList's tick).
	TCPWatchDelay = 20 * time.Millisecond
	// tcpWatchIdleTicks is how many ticks without a running exchange the
	// watch list ticks on before it sleeps until the next one: steady
	// traffic adds no timer per exchange, an idle node wakes for nothing.
	tcpWatchIdleTicks = 100
	// TCPMaxDialsPerPeer bounds the dials to one peer in progress: a
	// burst of requests past the idle connections goes over QUIC while
	// the pool grows, not through a burst of handshakes.
	TCPMaxDialsPerPeer = 4
	// TCPPeekAfter is how long a pooled connection must have been idle
	// before it is peeked (a system call) for its peer having closed it
	// (tlspool.Config.PeekAfter). One put back a moment ago is taken as
	// it is: a held request on it that fails before anything of the
	// answer came is sent once more on another (ForwardRemote), and a
	// streamed one, which cannot be sent again, peeks it (tcpSide.conn).
	TCPPeekAfter = time.Second
	// TCPSharedAfter is how many exchanges in flight to a peer get a
	// connection each before the next go as streams of connections
	// shared with others (tlspool.Config.SharedAfter): one at a time, a
	// connection of its own costs the least; under load, shared
	// connections coalesce their writes.
	TCPSharedAfter = 1
)

// Why a request went over QUIC while the transport is TCP, the reason
// label of nodeld_proxy_mesh_tcp_fallbacks_total.
const (
	fallbackNoLink   = "no_link"   // no live mesh link to the peer: QUIC waits for it
	fallbackDial     = "dial"      // the dial, handshake or admission failed
	fallbackDown     = "down"      // a dial failed within TCPRetryAfter
	fallbackPoolFull = "pool_full" // TCPMaxConnsPerPeer connections in use
	fallbackDialing  = "dialing"   // TCPMaxDialsPerPeer dials in progress, none idle
)

// Sides of nodeld_proxy_mesh_transport_total.
const (
	sideForward = "forward"
	sideServe   = "serve"
)

// TCP configures inference over TLS/TCP.
type TCP struct {
	// Transport is TransportTCP or TransportQUIC ("" is QUIC).
	Transport string
	// Listen is mesh.listen: with TransportTCP the node serves TCP on
	// its host and on the port the mesh's UDP socket is bound to.
	Listen string
	// sharedAfter is tlspool.Config.SharedAfter (0: TCPSharedAfter), for
	// the tests that carry every exchange as a stream (-1).
	sharedAfter int
}

// TCPFromConfig maps mesh.infer_transport and mesh.listen.
func TCPFromConfig(cfg *config.Config) TCP {
	return TCP{Transport: cfg.Mesh.InferTransport, Listen: cfg.Mesh.Listen}
}

// MeshPeers is what inference over TLS/TCP asks the mesh: which peers
// have a live link (and where), and whose pinned key a connection
// presents. *mesh.Mesh implements it.
type MeshPeers interface {
	LinkedPeer(nodeID string) (mesh.PeerInfo, bool)
	LinkedPeerByKey(key ed25519.PublicKey) (mesh.PeerInfo, bool)
	Ready() <-chan struct{}
	Addr() net.Addr
}

var _ MeshPeers = (*mesh.Mesh)(nil)

// inferStream is one KindInfer exchange as both sides drive it: a QUIC
// stream (*mesh.Stream) or one exchange on a pinned TLS connection
// (tcpClientStream, tcpServerStream). Its methods keep *mesh.Stream's
// contract; on a connection the end frames delimit an exchange, so
// CloseWrite and FinishReading send and wait for nothing, and an abort
// closes the connection.
type inferStream interface {
	io.Reader
	io.Writer
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	Context() context.Context
	CloseWrite() error
	Reset(code mesh.StreamCode)
	StopReading(code mesh.StreamCode)
	AbortWrite(code mesh.StreamCode)
	FinishReading(wait time.Duration) bool
}

var _ inferStream = (*mesh.Stream)(nil)

// requestEnder is a stream told, by the request's body reader, when the
// request's end frame has been read.
type requestEnder interface{ requestRead() }

// tcpSide is a forwarder's TLS/TCP transport: the pool it dials from and
// the server it runs.
type tcpSide struct {
	peers  MeshPeers
	pool   *tlspool.Pool
	cert   tls.Certificate
	listen string
	log    *zap.Logger
	now    func() time.Time

	mu    sync.Mutex                   // guards down, keys, addrs, srv
	down  map[string]time.Time         // node id -> QUIC only until
	keys  map[string]ed25519.PublicKey // node id -> the key its connections pin
	addrs map[string]dialAddr          // node id -> its TCP address, as last seen
	srv   *tlspool.Server              // while Run serves
}

// dialAddr is a peer's link address and the TCP address dialed beside it
// (formatted once, not for every request).
type dialAddr struct {
	link netip.AddrPort
	tcp  string
}

func newTCPSide(t TCP, d Deps, lg *zap.Logger) (*tcpSide, error) {
	switch t.Transport {
	case "", TransportQUIC:
		return nil, nil
	case TransportTCP:
	default:
		return nil, fmt.Errorf("proxy: mesh infer transport %q: want %s or %s", t.Transport, TransportTCP, TransportQUIC)
	}
	peers, ok := d.Mesh.(MeshPeers)
	if !ok || d.Identity == nil {
		return nil, errors.New("proxy: inference over tcp needs the node's identity and a mesh that reports its linked peers")
	}
	cert, err := d.Identity.TLSCertificate(time.Now())
	if err != nil {
		return nil, fmt.Errorf("proxy: mesh tcp certificate: %w", err)
	}
	pool, err := tlspool.NewPool(tlspool.Config{Certificate: cert, MaxConnsPerPeer: TCPMaxConnsPerPeer,
		MaxIdlePerPeer: TCPMaxIdlePerPeer, MaxDialsPerPeer: TCPMaxDialsPerPeer, HandshakeTimeout: TCPDialTimeout, ALPN: InferALPN, MuxALPN: InferMuxALPN,
		PeekAfter: TCPPeekAfter, SharedAfter: cmp.Or(t.sharedAfter, TCPSharedAfter)})
	if err != nil {
		return nil, err
	}
	return &tcpSide{peers: peers, pool: pool, cert: cert, listen: t.Listen, log: lg, now: time.Now,
		down: make(map[string]time.Time), keys: make(map[string]ed25519.PublicKey), addrs: make(map[string]dialAddr)}, nil
}

// conn returns a pooled connection to nodeID, or nil and why the request
// goes over QUIC instead. With checked (a streamed request, which cannot
// be sent again), a connection handed out unchecked is peeked first.
func (t *tcpSide) conn(ctx context.Context, nodeID string, checked bool) (*tlspool.Conn, string) {
	p, ok := t.peers.LinkedPeer(nodeID)
	if !ok || p.Addr == nil {
		return nil, fallbackNoLink
	}
	t.mu.Lock()
	if until, ok := t.down[nodeID]; ok {
		if t.now().Before(until) {
			t.mu.Unlock()
			return nil, fallbackDown
		}
		delete(t.down, nodeID)
	}
	t.keys[nodeID] = p.Key
	addr := t.tcpAddrLocked(nodeID, p.Addr)
	t.mu.Unlock()
	c, err := t.pool.Get(ctx, addr, p.Key)
	if err == nil && checked && c.Unchecked() && !c.Alive() {
		t.pool.Stale(c) // and the peer's other idle ones: Get dials
		c, err = t.pool.Get(ctx, addr, p.Key)
	}
	switch {
	case err == nil:
		return c, ""
	case errors.Is(err, tlspool.ErrPoolFull):
		return nil, fallbackPoolFull
	case errors.Is(err, tlspool.ErrDialing):
		return nil, fallbackDialing
	case ctx.Err() != nil:
		return nil, "" // the caller's request is over
	}
	t.mu.Lock()
	t.down[nodeID] = t.now().Add(TCPRetryAfter)
	t.mu.Unlock()
	t.log.Debug("mesh tcp dial failed; inference goes over quic", zap.String("peer", nodeID), zap.Error(err))
	return nil, fallbackDial
}

// tcpAddrLocked is the TCP address beside a peer's mesh (UDP) address.
// t.mu must be held.
func (t *tcpSide) tcpAddrLocked(nodeID string, a net.Addr) string {
	u, ok := a.(*net.UDPAddr)
	if !ok {
		return a.String()
	}
	link := u.AddrPort()
	if d, ok := t.addrs[nodeID]; ok && d.link == link {
		return d.tcp
	}
	d := dialAddr{link: link, tcp: link.String()}
	t.addrs[nodeID] = d
	return d.tcp
}

// peerEvent closes a peer's connections, both ways, when its link is
// lost or it is removed (as the QUIC streams on the link end with it), and
// lets a peer that links again be dialed at once.
func (t *tcpSide) peerEvent(ev table.PeerEvent) {
	switch ev.Kind {
	case table.PeerLinkUp:
		t.mu.Lock()
		delete(t.down, ev.Node)
		t.mu.Unlock()
	case table.PeerLinkLost, table.PeerRemoved:
		t.mu.Lock()
		key, srv := t.keys[ev.Node], t.srv
		delete(t.keys, ev.Node)
		delete(t.addrs, ev.Node)
		t.mu.Unlock()
		if key != nil {
			t.pool.ClosePeer(key)
		}
		if srv != nil {
			srv.ClosePeer(ev.Node)
		}
	}
}

// PeerEvent is told what the mesh reports of its links (wire it beside
// table.ApplyPeerEvent): a peer whose link is lost, or who is removed,
// loses its inference connections, in use and idle, both ways. A nil
// Forwarder, or one without TCP, ignores it.
func (f *Forwarder) PeerEvent(ev table.PeerEvent) {
	if f == nil || f.tcp == nil {
		return
	}
	f.tcp.peerEvent(ev)
}

// Run serves inference over TLS/TCP, when the transport is TCP, on
// mesh.listen's host and the port the mesh's UDP socket is bound to,
// admitting only configured peers with a pinned key and a live link,
// until ctx ends; otherwise it waits for ctx. A port that cannot be bound
// is an error, unless mesh.listen leaves the port to the system (port 0):
// then the node serves over QUIC only, and says so.
func (f *Forwarder) Run(ctx context.Context) error {
	t := f.tcp
	if t == nil || t.listen == "" {
		<-ctx.Done()
		return nil
	}
	select {
	case <-t.peers.Ready():
	case <-ctx.Done():
		return nil
	}
	host, port, err := net.SplitHostPort(t.listen)
	if err != nil {
		return fmt.Errorf("mesh tcp listen %q: %w", t.listen, err)
	}
	if u, ok := t.peers.Addr().(*net.UDPAddr); ok {
		port = strconv.Itoa(u.Port)
	}
	addr := net.JoinHostPort(host, port)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if _, p, _ := net.SplitHostPort(t.listen); p == "0" {
			f.log.Warn("mesh tcp port in use; peers reach inference over quic", zap.String("addr", addr), zap.Error(err))
			<-ctx.Done()
			return nil
		}
		return fmt.Errorf("mesh tcp listen %q: %w", addr, err)
	}
	watches := newWatchList(TCPWatchDelay)
	serve := func(ctx context.Context, peerID string, c net.Conn) { f.serveConn(ctx, peerID, c, watches) }
	srv, err := tlspool.NewServer(tlspool.ServerConfig{Listener: ln, Certificate: t.cert, Admit: t.admit,
		Handle: serve, HandshakeTimeout: TCPDialTimeout, MaxConns: TCPMaxServerConns, ALPN: InferALPN,
		MuxALPN: InferMuxALPN})
	if err != nil {
		_ = ln.Close()
		return err
	}
	t.mu.Lock()
	t.srv = srv
	t.mu.Unlock()
	f.log.Info("mesh inference listening on tcp", zap.Stringer("addr", ln.Addr()))
	wctx, stopWatches := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { watches.run(wctx) })
	err = srv.Run(ctx)
	stopWatches()
	wg.Wait()
	return err
}

// TCPAddr is the address inference over TCP is served on; nil when none.
func (f *Forwarder) TCPAddr() net.Addr {
	if f.tcp == nil {
		return nil
	}
	f.tcp.mu.Lock()
	defer f.tcp.mu.Unlock()
	if f.tcp.srv == nil {
		return nil
	}
	return f.tcp.srv.Addr()
}

// errNotLinked refuses a connection whose key is not a linked peer's.
var errNotLinked = errors.New("not a configured peer with a live link")

// admit is the server's admission: the key must be a configured peer's
// pinned key, and that peer must have a live link (default deny).
func (t *tcpSide) admit(key ed25519.PublicKey, _ net.Addr) (string, error) {
	p, ok := t.peers.LinkedPeerByKey(key)
	if !ok {
		return "", errNotLinked
	}
	return p.ID, nil
}

// serveConn serves an admitted connection's exchanges, one after
// another, each as ServeStream serves a stream, until the peer closes it,
// it idles TCPServerIdleTimeout, an exchange does not end cleanly, or ctx
// ends; a shared connection's stream (internal/mux) is served the same
// way. watches starts the watchers of long exchanges.
func (f *Forwarder) serveConn(ctx context.Context, peerID string, c net.Conn, watches *watchList) {
	peer, ok := f.tcp.peers.LinkedPeer(peerID)
	if !ok {
		return
	}
	raw := c
	if tc, ok := c.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	f.serveConnOn(ctx, peer, c, raw, watches)
}

// serveConnOn is serveConn on c (the TLS connection, or in a fuzz test
// any connection) over raw (its socket: deadlines, aborts).
func (f *Forwarder) serveConnOn(ctx context.Context, peer mesh.PeerInfo, c, raw net.Conn, watches *watchList) {
	// The exchanges' contexts hang off the connection's, not all off the
	// server's one (whose lock every request would take). Both are the
	// fast reader's kind (httpfast.Context): an exchange registers on its
	// connection's, and the pool on the exchange's, without the
	// allocations of context.WithTimeout and context.AfterFunc.
	cctx := httpfast.NewContext()
	stop := context.AfterFunc(ctx, func() { cctx.Cancel(context.Cause(ctx)) })
	var wg sync.WaitGroup
	cs := &tcpConnServer{f: f, ctx: cctx, peer: peer, c: c, raw: raw, wg: &wg, watches: watches}
	// The running exchange's context ends with the connection's: one
	// registration for the connection, not one an exchange.
	unlink := cctx.AfterFunc(cs.connEnded)
	defer func() {
		wg.Wait() // every exchange, on whichever goroutine, ended
		unlink()
		stop()
		cctx.Cancel(nil)
		cs.timer.Stop()
	}()
	idle := time.Now()
	cs.setReadDeadline(idle.Add(tcpIdleHorizon))
	first, err := cs.readFirst(idle)
	if err != nil {
		return
	}
	cs.serve(first)
}

// tcpConnServer is one served connection. Its exchanges run one at a
// time, each on the goroutine that read its first byte: the first on the
// connection's, each next one on the previous exchange's watcher (see
// tcpServerStream.watch).
type tcpConnServer struct {
	f       *Forwarder
	ctx     *httpfast.Context // ends with the connection or the server
	peer    mesh.PeerInfo
	c       net.Conn        // the TLS connection, or a shared one's stream
	raw     net.Conn        // its socket, or the stream
	wg      *sync.WaitGroup // every watcher; the connection's goroutine waits
	watches *watchList      // starts the watchers
	// last is an answer's last bytes, kept by writeLast until its
	// exchange ended (each exchange's in turn: one runs at a time).
	last []byte

	dmu   sync.Mutex  // guards rdSet
	rdSet time.Time   // the socket's read deadline (setReadDeadline)
	wdSet atomic.Bool // a write deadline is set (a refusal's)

	// cur is the exchange running (between begin and cancel), for the
	// connection's end (connEnded).
	cur atomic.Pointer[tcpServerStream]
	// timer is the serve timeout's, the connection's for all its
	// exchanges (httpfast.ConnTimer): an exchange costs no timer.
	timer httpfast.ConnTimer
	// hdr and head are what a request head's frame is read into
	// (mesh.ReadFrameBuffered), each exchange's in turn: a head is
	// decoded, its strings copied, before the next is read, and nothing
	// keeps its bytes.
	hdr  [mesh.FrameHeaderSize]byte
	head [headKeptBytes]byte
	// role is the last request head's role (readRequestHead), the string
	// the next head naming it is given.
	role string
	// body reads a held request body (readRequestBody), each exchange's
	// in turn.
	body meshBodyReader
	// one is readFirst's byte (a local array would escape to the heap
	// through io.ReadFull: an allocation a request).
	one [1]byte
}

// headKeptBytes is the largest request head a served connection reads
// into its own buffer (a chat request's is about 150 bytes); a larger one
// is allocated, as mesh.ReadFrame does.
const headKeptBytes = 512

// connEnded ends the running exchange's context with the connection's.
func (cs *tcpConnServer) connEnded() {
	if s := cs.cur.Load(); s != nil {
		s.ctx.Cancel(cs.ctx.Cause())
	}
}

// setReadDeadline sets the socket's read deadline to t as
// httpfast.CoarseDeadline decides (a zero t clears it): an exchange's
// deadline, re-armed for each frame, then changes the runtime's timer
// about once a second, not once a frame.
func (cs *tcpConnServer) setReadDeadline(t time.Time) {
	cs.dmu.Lock()
	defer cs.dmu.Unlock()
	if next, change := httpfast.CoarseDeadline(cs.rdSet, t); change {
		cs.rdSet = next
		_ = cs.raw.SetReadDeadline(next)
	}
}

// lastKeptBytes bounds the last bytes of an answer writeLast keeps.
const lastKeptBytes = 16 << 10

// lastSend is a connection as the Sender of its kept last bytes.
type lastSend tcpConnServer

func (l *lastSend) Send() error {
	_, err := l.c.Write(l.last)
	l.last = l.last[:0]
	return err
}

// serve serves exchanges, the first of which has its first byte read,
// until the connection ends or an exchange hands it to its watcher.
func (cs *tcpConnServer) serve(first byte) {
	for {
		s := &tcpServerStream{cs: cs, first: first, hasFirst: true}
		// One context for the exchange: the consumer going away, the
		// serve timeout and this node stopping all end it (servesWithin).
		s.begin()
		if cs.wdSet.Swap(false) {
			_ = cs.raw.SetWriteDeadline(time.Time{}) // the last exchange's refusal's
		}
		cs.f.met.transport(sideServe, TransportTCP)
		cs.f.serveInfer(cs.ctx, cs.peer, s)
		if !s.end() {
			return // closed, or handed to the exchange's watcher
		}
		// A short exchange started no watcher: this goroutine waits for
		// the next request (a goroutine and a wake-up fewer per request).
		idle := time.Now()
		cs.setReadDeadline(idle.Add(tcpIdleHorizon))
		if len(cs.last) > 0 {
			// The answer's last bytes leave in the poller window of the
			// wait for the next request: its read finds it, not nothing.
			if err := httpfast.SendAwait(cs.raw, (*lastSend)(cs)); err != nil {
				_ = cs.raw.Close()
				return
			}
		}
		var err error
		if first, err = cs.readFirst(idle); err != nil {
			_ = cs.raw.Close()
			return
		}
	}
}

// tcpIdleHorizon is how far ahead a served connection's read deadline is
// set while it waits for its next exchange: as far as the exchange's
// first read sets it (MeshFirstFrameTimeout), so that the two are within
// httpfast.DeadlineSlack of each other and a busy connection changes
// its runtime timer about once a second, not twice an exchange.
// readFirst re-arms it until the connection was idle
// TCPServerIdleTimeout.
const tcpIdleHorizon = MeshFirstFrameTimeout

// readFirst reads the first byte of the connection's next exchange, the
// connection idle since idle with its read deadline at most
// tcpIdleHorizon ahead: a deadline that passes with nothing read is
// re-armed, until the connection was idle TCPServerIdleTimeout.
func (cs *tcpConnServer) readFirst(idle time.Time) (byte, error) {
	for {
		_, err := io.ReadFull(cs.c, cs.one[:])
		if err == nil {
			return cs.one[0], nil
		}
		now := time.Now()
		left := TCPServerIdleTimeout - now.Sub(idle)
		if !httpfast.IsTimeout(err) || left <= 0 {
			return 0, err
		}
		cs.setReadDeadline(now.Add(min(left, tcpIdleHorizon)))
	}
}

// tcpServerStream is one exchange served on a connection. An exchange
// still running TCPWatchDelay after its request's end frame was read
// (requestRead) starts a watcher (watchList) that reads on: the consumer sends nothing
// before the answer's end, so what it reads is either the connection's end
// (the consumer went away: Context ends, which cancels the instance's
// request, as a reset QUIC stream does) or the first byte of the next
// request, which it serves, once this exchange ended cleanly, on its own
// goroutine.
type tcpServerStream struct {
	cs       *tcpConnServer
	first    byte
	hasFirst bool              // first is still to be read (the reading goroutine's)
	clean    bool              // set before over is closed (beside first: s fits 224 bytes)
	ctx      *httpfast.Context // the exchange's (&ctxv): see begin
	ctxv     httpfast.Context  // ctx's, in s's allocation
	over     chan struct{}     // made when the watcher starts, closed by end

	// begun is when begin ran: serveInfer's now for the head's read
	// deadline (exchangeNow).
	begun time.Time

	mu       sync.Mutex // guards reqDone, ended, wroteEnd, broken, watching
	reqDone  bool       // the request's end frame was read
	watching bool       // the watcher started
	ended    bool       // end ran
	wroteEnd bool       // the answer's last frame was written (CloseWrite)
	broken   bool       // the connection cannot serve another exchange
}

func (s *tcpServerStream) Read(p []byte) (int, error) {
	if s.hasFirst && len(p) > 0 {
		p[0], s.hasFirst = s.first, false
		return 1, nil
	}
	n, err := s.cs.c.Read(p)
	if err != nil {
		s.markBroken()
	}
	return n, err
}

func (s *tcpServerStream) Write(p []byte) (int, error) {
	n, err := writeRecords(s.cs.c, p)
	if err != nil {
		s.markBroken()
	}
	return n, err
}

func (s *tcpServerStream) markBroken() {
	s.mu.Lock()
	s.broken = true
	s.mu.Unlock()
}

// writeLast writes an answer's last bytes (its end frame among them).
// When no watcher reads the connection, they are kept (up to
// lastKeptBytes) and leave once the exchange ended: with the wait for the
// next request (tcpConnServer.serve), or before the connection closes or
// goes to a watcher (end). A failure to send them then closes the
// connection, which the consumer sees as a broken answer.
func (s *tcpServerStream) writeLast(p []byte) (int, error) {
	s.mu.Lock()
	keep := !s.watching && len(p) <= lastKeptBytes
	if keep {
		s.cs.last = append(s.cs.last[:0], p...)
	}
	s.mu.Unlock()
	if keep {
		return len(p), nil
	}
	return s.Write(p)
}

// SetReadDeadline applies until the request is read; then the watcher
// owns the read side.
func (s *tcpServerStream) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reqDone || s.ended {
		return nil
	}
	s.cs.setReadDeadline(t)
	return nil
}

func (s *tcpServerStream) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() {
		s.cs.wdSet.Store(true)
	}
	return s.cs.raw.SetWriteDeadline(t)
}

func (s *tcpServerStream) Context() context.Context { return s.ctx }

// begin makes the exchange's context: it ends with the connection's
// (with its cause), after the serve timeout (context.DeadlineExceeded,
// its cause), or by cancel (the consumer went away: context.Canceled).
func (s *tcpServerStream) begin() {
	s.ctx = &s.ctxv // in s's allocation
	s.ctx.Init()
	s.cs.cur.Store(s)
	// After the store: a connection that ended before it (connEnded
	// found no exchange) is seen here.
	if s.cs.ctx.Err() != nil {
		s.ctx.Cancel(s.cs.ctx.Cause())
	}
	s.begun = time.Now()
	s.cs.timer.Watch(s, s.begun.Add(s.cs.f.serveTimeout))
}

// Check is the serve timeout's timer reaching s's due time
// (httpfast.Checker): s times out.
func (s *tcpServerStream) Check(time.Time) time.Time {
	s.ctx.Cancel(context.DeadlineExceeded)
	return time.Time{}
}

// cancel ends the exchange's context (first cause wins); it is no longer
// the connection's running one (connEnded) nor watched by its timer.
// Idempotent.
func (s *tcpServerStream) cancel() {
	s.cs.cur.CompareAndSwap(s, nil)
	s.cs.timer.Unwatch(s)
	s.ctx.Cancel(nil)
}

func (s *tcpServerStream) servesWithin() {}

// CloseWrite marks the answer complete: its end frame (or refusal) went.
func (s *tcpServerStream) CloseWrite() error {
	s.mu.Lock()
	s.wroteEnd = true
	s.mu.Unlock()
	return nil
}

// Reset closes the connection: the consumer sees it end at once.
func (s *tcpServerStream) Reset(mesh.StreamCode) {
	s.markBroken()
	s.cancel()
	_ = s.cs.raw.Close()
}

func (s *tcpServerStream) AbortWrite(code mesh.StreamCode) { s.Reset(code) }

// StopReading leaves the rest of the request unread: the connection then
// serves no other exchange.
func (s *tcpServerStream) StopReading(mesh.StreamCode) {
	s.mu.Lock()
	if !s.reqDone {
		s.broken = true
	}
	s.mu.Unlock()
}

func (s *tcpServerStream) FinishReading(time.Duration) bool { return true }

// appendRespEnd appends the answer's end frame for s. On a connection it
// carries one byte, connKept when the request was read to its end frame
// (the connection then serves the next exchange), connClosed when not (a
// streamed body the instance answered before it read it whole: the
// connection closes after): the consumer reuses it only when told so.
// On a QUIC stream it is empty.
func appendRespEnd(w []byte, s inferStream) []byte {
	ts, ok := s.(*tcpServerStream)
	if !ok {
		return mesh.AppendFrameHeader(w, frameRespEnd, 0)
	}
	ts.mu.Lock()
	kept := ts.reqDone && !ts.broken
	ts.mu.Unlock()
	b := connClosed
	if kept {
		b = connKept
	}
	return append(mesh.AppendFrameHeader(w, frameRespEnd, 1), b)
}

// The end frame's byte on a connection (appendRespEnd).
const (
	connClosed byte = 0
	connKept   byte = 1
)

// requestRead hands the exchange to the watch list once the request's
// end frame is read.
func (s *tcpServerStream) requestRead() {
	s.mu.Lock()
	if s.reqDone || s.ended {
		s.mu.Unlock()
		return
	}
	s.reqDone = true // the read deadline stays until a watcher reads (watchDue)
	s.mu.Unlock()
	s.cs.watches.add(s, time.Now())
}

// watchDue is the watch list's look at an exchange: one that ended is
// dropped; one still running that is due (its request was read
// TCPWatchDelay ago) starts its watcher and is dropped; any other is kept.
func (s *tcpServerStream) watchDue(due bool) (keep bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended || s.watching:
		return false
	case !due:
		return true
	}
	s.watching = true
	// The watcher reads with no deadline (the request's is left until
	// now), until end sets the idle one. Only a watcher waits for the
	// end. The exchange is running: its goroutine has not reached Wait.
	s.cs.setReadDeadline(time.Time{})
	s.over = make(chan struct{})
	s.cs.wg.Go(s.watch)
	return false
}

// end runs once the exchange's handler returned: a clean exchange leaves
// the connection to its watcher, if it started (idle from now,
// TCPServerIdleTimeout), or to the caller (cont); any other closes it.
func (s *tcpServerStream) end() (cont bool) {
	s.mu.Lock()
	s.ended = true
	clean := s.reqDone && s.wroteEnd && !s.broken
	watching := s.watching
	s.mu.Unlock()
	if len(s.cs.last) > 0 && (!clean || watching) {
		// Kept by writeLast: they go now, as the connection closes or
		// goes to the watcher (which then serves the next request).
		if err := (*lastSend)(s.cs).Send(); err != nil {
			s.markBroken()
			clean = false
		}
	}
	if clean && watching {
		s.cs.setReadDeadline(time.Now().Add(TCPServerIdleTimeout))
	} else if !clean {
		_ = s.cs.raw.Close()
	}
	s.clean = clean
	if watching {
		close(s.over) // made with watching, under s.mu
	}
	s.cancel()
	return clean && !watching
}

// watch reads past the request: the connection's end cancels the
// exchange; a byte is the next request's first, served once this
// exchange ended cleanly.
func (s *tcpServerStream) watch() {
	var one [1]byte
	_, err := s.cs.c.Read(one[:])
	if err != nil {
		s.cancel() // the consumer went away, or the exchange closed the connection
		<-s.over
		_ = s.cs.raw.Close()
		return
	}
	<-s.over
	if !s.clean {
		_ = s.cs.raw.Close()
		return
	}
	s.cs.serve(one[0])
}

// tcpClientStream is one exchange a consumer sends on a pooled
// connection. Any abort closes the connection; the connection goes back
// to the pool only after an exchange read to its end frame.
type tcpClientStream struct {
	c      *tlspool.Conn
	broken atomic.Bool
	// kept is the answer's end frame saying the serving side read the
	// request whole (appendRespEnd); set by relayResponse.
	kept bool
	// ioErr is whether a Read or Write failed other than by a deadline:
	// the connection ended (closed, reset, aborted by ClosePeer).
	ioErr atomic.Bool
	// held is the request Send writes (ForwardRemote's, for SendAwait).
	held heldRequest
	// got is whether a Read returned anything: the peer was answering.
	got bool
}

// heldRequest is a request whose body is held whole.
type heldRequest struct {
	head      meshRequestHead
	body, buf []byte
}

// ContextDone resets s: its forward's context ended (watchReset).
func (s *tcpClientStream) ContextDone() { s.Reset(mesh.StreamCodeCancelled) }

// Send writes s.held (httpfast.Sender).
func (s *tcpClientStream) Send() error {
	return sendRequest(s, s.held.head, s.held.body, s.held.buf)
}

func (s *tcpClientStream) failed(err error) {
	s.broken.Store(true)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		s.ioErr.Store(true)
	}
}

func (s *tcpClientStream) Read(p []byte) (int, error) {
	n, err := s.c.Read(p)
	if n > 0 {
		s.got = true
	}
	if err != nil {
		s.failed(err)
	}
	return n, err
}

func (s *tcpClientStream) Write(p []byte) (int, error) {
	n, err := writeRecords(s.c, p)
	if err != nil {
		s.failed(err)
	}
	return n, err
}

// maxRecordPayload is the most a TLS record carries: a write of more is
// several records.
const maxRecordPayload = 16 << 10

// writeRecords writes p to a TLS connection: a p of several records (a
// body chunk) leaves in one system call (httpfast.WriteCorked), not one
// a record.
func writeRecords(c net.Conn, p []byte) (n int, err error) {
	if len(p) <= maxRecordPayload {
		return c.Write(p)
	}
	err = httpfast.WriteCorked(c, func() error {
		n, err = c.Write(p)
		return err
	})
	return n, err
}

func (s *tcpClientStream) SetReadDeadline(t time.Time) error  { return s.c.SetReadDeadline(t) }
func (s *tcpClientStream) SetWriteDeadline(t time.Time) error { return s.c.SetWriteDeadline(t) }
func (s *tcpClientStream) Context() context.Context           { return context.Background() }
func (s *tcpClientStream) CloseWrite() error                  { return nil }
func (s *tcpClientStream) FinishReading(time.Duration) bool   { return true }

// Reset aborts the connection; it may be called from any goroutine.
func (s *tcpClientStream) Reset(mesh.StreamCode) {
	s.broken.Store(true)
	s.c.Abort()
}

// StopReading does nothing: the exchange's end decides whether the
// connection is reused or aborted (ForwardRemote).
func (s *tcpClientStream) StopReading(mesh.StreamCode) {}

func (s *tcpClientStream) AbortWrite(code mesh.StreamCode) { s.Reset(code) }

// connFailed reports whether s is an exchange on a connection that ended
// under it (closed, reset, aborted by ClosePeer) rather than one the peer
// answered badly or that passed a deadline: as a QUIC link failure, the
// request may go to another node when nothing was relayed.
func connFailed(s inferStream) bool {
	cs, ok := s.(*tcpClientStream)
	return ok && cs.ioErr.Load()
}

// watchList starts the watchers of a server's exchanges that run long
// (tcpServerStream.watch): one goroutine (run) ticks every delay/2 while
// exchanges are served, where a timer per exchange (time.AfterFunc) cost
// a timer and, most often, a wake-up of an idle thread for each request.
// It sleeps after tcpWatchIdleTicks ticks with nothing listed, until add.
type watchList struct {
	delay time.Duration
	kick  chan struct{} // size 1: add wakes a sleeping run

	mu      sync.Mutex // guards entries, asleep
	entries []watchEntry
	asleep  bool
}

// watchEntry is an exchange whose request was read at at.
type watchEntry struct {
	s  *tcpServerStream
	at time.Time
}

func newWatchList(delay time.Duration) *watchList {
	return &watchList{delay: delay, kick: make(chan struct{}, 1)}
}

// add lists an exchange whose request was read at now.
func (w *watchList) add(s *tcpServerStream, now time.Time) {
	w.mu.Lock()
	w.entries = append(w.entries, watchEntry{s: s, at: now})
	wake := w.asleep
	w.asleep = false
	w.mu.Unlock()
	if wake {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// run ticks until ctx ends: each tick starts the watchers that are due.
func (w *watchList) run(ctx context.Context) {
	tick := time.NewTicker(w.delay / 2)
	defer tick.Stop()
	for idle := 0; ; {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if w.sweep(now) > 0 {
				idle = 0
				continue
			}
			if idle++; idle < tcpWatchIdleTicks {
				continue
			}
			w.mu.Lock()
			w.asleep = len(w.entries) == 0
			asleep := w.asleep
			w.mu.Unlock()
			if !asleep {
				idle = 0
				continue
			}
			tick.Stop()
			select {
			case <-ctx.Done():
				return
			case <-w.kick:
			}
			tick.Reset(w.delay / 2)
			idle = 0
		}
	}
}

// sweep starts the watchers due at now, drops the exchanges that ended,
// and returns how many stay listed.
func (w *watchList) sweep(now time.Time) int {
	w.mu.Lock()
	list := w.entries
	w.entries = nil
	w.mu.Unlock()
	kept := list[:0]
	for _, e := range list {
		if e.s.watchDue(now.Sub(e.at) >= w.delay) {
			kept = append(kept, e)
		}
	}
	clear(list[len(kept):])
	w.mu.Lock()
	w.entries = append(kept, w.entries...)
	n := len(w.entries)
	w.mu.Unlock()
	return n
}
