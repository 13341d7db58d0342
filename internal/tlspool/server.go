package tlspool

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mux"
)

// DefaultMaxServerConns is ServerConfig.MaxConns when 0.
const DefaultMaxServerConns = 1024

// ServerConfig configures a Server.
type ServerConfig struct {
	// Listener is where connections arrive (a TCP listener); required.
	// Run closes it.
	Listener net.Listener
	// Certificate is this node's certificate (Ed25519); required.
	Certificate tls.Certificate
	// Admit decides a client by its certificate's key, and returns what
	// the handler is told of it (its node id, say); required: no Admit,
	// no admission.
	Admit func(key ed25519.PublicKey, remote net.Addr) (peer string, err error)
	// Handle serves one admitted connection until it returns; the
	// connection is closed then. On a shared connection (MuxALPN) it
	// serves each stream, which is closed (reset) when Handle returns
	// unless Handle ended it (mux.Stream.End). ctx ends when Run is
	// stopping. Required.
	Handle func(ctx context.Context, peer string, c net.Conn)
	// HandshakeTimeout bounds a handshake and the admission byte (0:
	// DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// MaxConns bounds the connections served at once (0:
	// DefaultMaxServerConns); more are closed as they arrive. It bounds
	// the streams of shared connections served at once too, apart: one
	// past it is reset as it arrives.
	MaxConns int
	// ALPN, when set, is the one application protocol served: a client
	// that does not offer it fails its handshake.
	ALPN string
	// MuxALPN, when set beside ALPN, is served too, and preferred: a
	// client that offers it has its exchanges carried as streams of
	// the connection (internal/mux), each served by Handle.
	MuxALPN string
	// Mux configures those streams (zero fields: mux's defaults); the
	// pool's must be the same.
	Mux mux.Config
}

// Server accepts the connections of a Pool's dials.
type Server struct {
	cfg ServerConfig
	tls *tls.Config

	mu    sync.Mutex          // guards conns
	conns map[net.Conn]string // the admitted peer, "" before admission
	// streams counts the streams of shared connections being served, for
	// MaxConns: a peer's shared connection may carry up to
	// mux.Config.MaxStreams each, so the bound on connections alone
	// would not bound the goroutines a peer can make this node run.
	streams atomic.Int64
}

// NewServer validates cfg and returns a server; it starts nothing.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxServerConns
	}
	var errs []error
	if cfg.Listener == nil {
		errs = append(errs, errors.New("listener: required"))
	}
	if _, ok := cfg.Certificate.PrivateKey.(ed25519.PrivateKey); !ok || len(cfg.Certificate.Certificate) == 0 {
		errs = append(errs, errors.New("certificate: want an Ed25519 certificate and key"))
	}
	if cfg.Admit == nil || cfg.Handle == nil {
		errs = append(errs, errors.New("admit and handle: required"))
	}
	if cfg.HandshakeTimeout < 0 || cfg.MaxConns < 0 || cfg.MaxConns > MaxConnsLimit*16 {
		errs = append(errs, fmt.Errorf("handshake timeout %v, max conns %d: out of range", cfg.HandshakeTimeout, cfg.MaxConns))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("tlspool: server: %w", err)
	}
	if cfg.MuxALPN != "" && (cfg.ALPN == "" || cfg.MuxALPN == cfg.ALPN) {
		return nil, errors.New("tlspool: server: mux alpn wants an alpn of its own beside alpn")
	}
	// The server's order decides: the shared connections first.
	var protos []string
	if cfg.MuxALPN != "" {
		protos = append(protos, cfg.MuxALPN)
	}
	if cfg.ALPN != "" {
		protos = append(protos, cfg.ALPN)
	}
	return &Server{cfg: cfg, conns: make(map[net.Conn]string), tls: &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cfg.Certificate},
		ClientAuth:   tls.RequireAnyClientCert, // checked in serve, by Admit
		NextProtos:   protos,
		// Nothing resumes: the pool keeps connections, not sessions, and
		// an idle connection must carry no unread ticket.
		SessionTicketsDisabled: true,
	}}, nil
}

// Run accepts connections until ctx ends, serving each on its own
// goroutine: handshake, admission, then Handle. It closes the listener and
// every connection once ctx ends, waits for every goroutine, and returns
// nil; an accept failure other than the close is returned.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() {
		_ = s.cfg.Listener.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for c := range s.conns {
			_ = c.Close()
		}
	})
	defer stop()
	for {
		raw, err := s.cfg.Listener.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			_ = s.cfg.Listener.Close()
			return fmt.Errorf("tlspool: accept: %w", err)
		}
		if !s.track(ctx, raw) {
			_ = raw.Close()
			continue
		}
		wg.Go(func() {
			defer s.untrack(raw)
			s.serve(ctx, raw)
		})
	}
}

// track records a connection, unless the server is stopping or full.
func (s *Server) track(ctx context.Context, c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil || len(s.conns) >= s.cfg.MaxConns {
		return false
	}
	s.conns[c] = ""
	return true
}

// ServerStats are what a server serves now.
type ServerStats struct {
	// Conns are the connections open (admitted or in their handshake),
	// shared ones included; Streams the streams of shared connections
	// being served.
	Conns, Streams int
}

// Stats returns what the server serves now.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	return ServerStats{Conns: n, Streams: int(max(s.streams.Load(), 0))}
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.cfg.Listener.Addr() }

// ClosePeer closes every connection admitted for peer (as Admit named
// it), as when the peer is known dead or removed, and returns how many.
func (s *Server) ClosePeer(peer string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c, p := range s.conns {
		if p == peer && peer != "" {
			_ = c.Close()
			n++
		}
	}
	return n
}

func (s *Server) untrack(c net.Conn) {
	_ = c.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

func (s *Server) serve(ctx context.Context, raw net.Conn) {
	_ = raw.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	tc := tls.Server(httpfast.RawIO(raw), s.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		return
	}
	key, err := identity.PeerKey(rawChain(tc.ConnectionState().PeerCertificates))
	if err != nil {
		return
	}
	peer, err := s.cfg.Admit(key, raw.RemoteAddr())
	if err != nil {
		return // the client sees the connection close: not admitted
	}
	proto := tc.ConnectionState().NegotiatedProtocol
	shared := s.cfg.MuxALPN != "" && proto == s.cfg.MuxALPN
	if s.cfg.ALPN != "" && proto != s.cfg.ALPN && !shared {
		return
	}
	s.mu.Lock()
	if _, ok := s.conns[raw]; ok {
		s.conns[raw] = peer
	}
	s.mu.Unlock()
	if _, err := tc.Write([]byte{admitted}); err != nil {
		return
	}
	_ = raw.SetDeadline(time.Time{})
	if shared {
		s.serveShared(ctx, peer, tc)
		return
	}
	s.cfg.Handle(ctx, peer, tc)
}

// serveShared serves a shared connection's streams until it ends (the
// client closes it, Run stops, ClosePeer). Each stream is served by the
// goroutine that accepted it, which first starts the next acceptor: the
// request's frames are read by the goroutine that serves them, with no
// hand-off to another (whose wake-up, on an idle second thread, costs
// more at one request at a time than the stream saves). The new
// acceptor's start is off the request's path.
func (s *Server) serveShared(ctx context.Context, peer string, tc *tls.Conn) {
	sess, err := mux.Server(tc, s.cfg.Mux)
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	var accept func()
	accept = func() {
		st, err := sess.Accept()
		if err != nil {
			return
		}
		wg.Go(accept)
		defer st.Close() // a reset, unless Handle ended it
		defer s.streams.Add(-1)
		if s.streams.Add(1) > int64(s.cfg.MaxConns) {
			return
		}
		s.cfg.Handle(ctx, peer, st)
	}
	accept()
	wg.Wait()
	_ = sess.Close()
}

// rawChain returns the certificates as presented.
func rawChain(certs []*x509.Certificate) [][]byte {
	raw := make([][]byte, len(certs))
	for i, c := range certs {
		raw[i] = c.Raw
	}
	return raw
}
