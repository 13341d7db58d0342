package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
)

// The TLS relays are the floor under a mesh hop: two relays, the first
// taking plain connections and carrying them over TLS 1.3 to the second,
// which carries them on to the upstream, still in lockstep and with no HTTP
// work. Two ways to carry them:
//
//   - goroutine: each client connection gets a TLS connection of its own
//     (what nginx's upstream keep-alive does, and nodeld's TCP transport);
//   - mux: every client connection is a stream of frames over a few shared
//     TLS connections. A sender that finds another's write under way leaves
//     its frame in the buffer that write's sender flushes next, so under
//     load one system call and one TLS record carry many exchanges; one
//     reader a connection hands each frame to its stream.
//
// A frame is a 4-byte stream id, a 4-byte length and the bytes; length
// zero ends the stream.

// tlsRelay is how a relay's two legs are secured.
type tlsRelay struct {
	in  *tls.Config // the listener's, or nil for plain
	out *tls.Config // the upstream leg's, or nil for plain
}

// loadTLSRelay reads the certificate (which the TLS-out side pins as its
// only root) and, for a TLS-in relay, its key.
func loadTLSRelay(in, out bool, certFile, keyFile string) (tlsRelay, error) {
	var r tlsRelay
	if !in && !out {
		return r, nil
	}
	if certFile == "" {
		return r, errors.New("relay: -tls-in and -tls-out need -cert")
	}
	if in {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return r, fmt.Errorf("relay: %w", err)
		}
		r.in = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}
	}
	if out {
		pemBytes, err := os.ReadFile(certFile)
		if err != nil {
			return r, fmt.Errorf("relay: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pemBytes) {
			return r, fmt.Errorf("relay: %s holds no certificate", certFile)
		}
		leaf, err := firstCert(pemBytes)
		if err != nil {
			return r, err
		}
		name := leaf.Subject.CommonName
		if len(leaf.DNSNames) > 0 {
			name = leaf.DNSNames[0]
		}
		r.out = &tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS13,
			ClientSessionCache: tls.NewLRUClientSessionCache(64)}
	}
	return r, nil
}

func firstCert(pemBytes []byte) (*x509.Certificate, error) {
	for rest := pemBytes; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return nil, errors.New("relay: no certificate in -cert")
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil && b.Type == "CERTIFICATE" {
			return c, nil
		}
	}
}

// dialUp dials the upstream leg, over TLS when r.out is set.
func (r tlsRelay) dialUp(up *net.TCPAddr) (net.Conn, error) {
	c, err := net.DialTCP("tcp", nil, up)
	if err != nil || r.out == nil {
		return c, err
	}
	tc := tls.Client(c, r.out)
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}

// combiner sends frames on one connection. A sender that finds a write
// under way appends its frame and returns; the writer sends everything
// appended meanwhile before it lets go.
type combiner struct {
	w     io.Writer
	mu    sync.Mutex
	buf   []byte
	spare []byte
	busy  bool
	err   error
}

func (cb *combiner) send(id uint32, p []byte) error {
	cb.mu.Lock()
	if cb.err != nil {
		err := cb.err
		cb.mu.Unlock()
		return err
	}
	cb.buf = binary.BigEndian.AppendUint32(cb.buf, id)
	cb.buf = binary.BigEndian.AppendUint32(cb.buf, uint32(len(p)))
	cb.buf = append(cb.buf, p...)
	if cb.busy {
		cb.mu.Unlock()
		return nil
	}
	cb.busy = true
	for len(cb.buf) > 0 && cb.err == nil {
		out := cb.buf
		cb.buf = cb.spare[:0]
		cb.mu.Unlock()
		_, err := cb.w.Write(out)
		cb.mu.Lock()
		cb.spare = out[:0]
		if err != nil {
			cb.err = err
		}
	}
	cb.busy = false
	err := cb.err
	cb.mu.Unlock()
	return err
}

// readFrames hands each frame read from r to deliver, until r fails.
func readFrames(r io.Reader, deliver func(id uint32, p []byte)) error {
	br := bufio.NewReaderSize(r, relayBuf)
	var hdr [8]byte
	buf := make([]byte, relayBuf)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return err
		}
		id, n := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
		if n > relayBuf {
			return fmt.Errorf("relay: a frame of %d bytes", n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return err
		}
		deliver(id, buf[:n])
	}
}

// mailbox holds one message for a lockstep stream: the reader copies a
// frame in and signals; the stream takes it and answers before the next
// can come.
type mailbox struct {
	buf  []byte
	got  chan struct{}
	gone atomic.Bool
}

func newMailbox() *mailbox { return &mailbox{buf: make([]byte, 0, 4096), got: make(chan struct{}, 1)} }

func (m *mailbox) put(p []byte) {
	m.buf = append(m.buf[:0], p...)
	// In lockstep the box is empty here, unless its stream has given up
	// (its upstream failed): the reader must not wait on it then.
	select {
	case m.got <- struct{}{}:
	default:
	}
}

// muxOut is the first relay of a mux pair: plain client connections in,
// streams over n shared TLS connections out.
type muxOut struct {
	conns []*muxOutConn
	next  atomic.Uint32
}

type muxOutConn struct {
	cb      combiner
	conn    net.Conn
	mu      sync.Mutex
	streams map[uint32]*mailbox
}

func relayMuxOut(ctx context.Context, ln net.Listener, up *net.TCPAddr, r tlsRelay, n int) error {
	m := &muxOut{}
	for range n {
		c, err := r.dialUp(up)
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		mc := &muxOutConn{conn: c, streams: map[uint32]*mailbox{}}
		mc.cb.w = c
		m.conns = append(m.conns, mc)
		go func() {
			_ = readFrames(c, func(id uint32, p []byte) {
				mc.mu.Lock()
				mb := mc.streams[id]
				mc.mu.Unlock()
				if mb != nil {
					mb.put(p)
				}
			})
			_ = c.Close()
			mc.mu.Lock()
			for _, mb := range mc.streams {
				mb.gone.Store(true)
				close(mb.got)
			}
			mc.streams = map[uint32]*mailbox{}
			mc.mu.Unlock()
		}()
	}
	defer func() {
		for _, mc := range m.conns {
			_ = mc.conn.Close()
		}
	}()
	return serveEach(ctx, ln, func(c net.Conn) {
		id := m.next.Add(1)
		mc := m.conns[int(id)%len(m.conns)]
		mb := newMailbox()
		mc.mu.Lock()
		mc.streams[id] = mb
		mc.mu.Unlock()
		mc.stream(ctx, c, id, mb)
	})
}

func (mc *muxOutConn) stream(ctx context.Context, c net.Conn, id uint32, mb *mailbox) {
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	defer func() {
		mc.mu.Lock()
		delete(mc.streams, id)
		mc.mu.Unlock()
		_ = mc.cb.send(id, nil)
	}()
	buf := make([]byte, relayBuf)
	for {
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			return
		}
		if err := mc.cb.send(id, buf[:n]); err != nil {
			return
		}
		if _, ok := <-mb.got; !ok || mb.gone.Load() {
			return
		}
		if _, err := c.Write(mb.buf); err != nil {
			return
		}
	}
}

// relayMuxIn is the second relay of a mux pair: TLS connections of
// streams in, each stream on a plain upstream connection of its own.
func relayMuxIn(ctx context.Context, ln net.Listener, up *net.TCPAddr) error {
	return serveEach(ctx, ln, func(c net.Conn) { muxInConn(ctx, c, up) })
}

func muxInConn(ctx context.Context, c net.Conn, up *net.TCPAddr) {
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	cb := &combiner{w: c}
	streams := map[uint32]*mailbox{}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer func() {
		for _, mb := range streams {
			close(mb.got)
		}
	}()
	_ = readFrames(c, func(id uint32, p []byte) {
		mb := streams[id]
		if len(p) == 0 {
			if mb != nil {
				close(mb.got)
				delete(streams, id)
			}
			return
		}
		if mb == nil {
			u, err := net.DialTCP("tcp", nil, up)
			if err != nil {
				return
			}
			mb = newMailbox()
			streams[id] = mb
			wg.Go(func() { muxInStream(u, cb, id, mb) })
		}
		mb.put(p)
	})
}

func muxInStream(u net.Conn, cb *combiner, id uint32, mb *mailbox) {
	defer u.Close()
	buf := make([]byte, relayBuf)
	for range mb.got {
		if _, err := u.Write(mb.buf); err != nil {
			return
		}
		n, err := u.Read(buf)
		if err != nil {
			return
		}
		if err := cb.send(id, buf[:n]); err != nil {
			return
		}
	}
}
