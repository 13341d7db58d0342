package proxy

import (
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/httpfast"
)

// connGate bounds the client connections a role's listener holds open at
// once (Config.MaxConnections), idle or busy, whichever server reads them
// (the fast reader or net/http after a hand-off). A connection is counted
// from its Accept to its first Close. One accepted while the role holds
// its cap is closed at once, without a byte written: the listener's
// backlog still completes the client's connect, so the client sees its
// connection closed, and the refusal is counted and logged (at most once
// per connRefusedLogEvery). Lowering the cap closes nothing; it applies
// to the next connection accepted.
type connGate struct {
	role    string
	log     *zap.Logger
	max     atomic.Int64
	open    atomic.Int64
	lastLog atomic.Int64 // Unix nanoseconds of the last refusal logged
	gauge   prometheus.Gauge
	refused prometheus.Counter
}

// admit counts a new connection, or reports false when the role holds
// its cap.
func (g *connGate) admit() bool {
	for {
		n := g.open.Load()
		if n >= g.max.Load() {
			return false
		}
		if g.open.CompareAndSwap(n, n+1) {
			g.gauge.Inc()
			return true
		}
	}
}

func (g *connGate) release() {
	g.open.Add(-1)
	g.gauge.Dec()
}

// refuse counts a connection over the cap and logs it unless one was
// logged within connRefusedLogEvery.
func (g *connGate) refuse(remote net.Addr) {
	g.refused.Inc()
	now := time.Now().UnixNano()
	last := g.lastLog.Load()
	if now-last < int64(connRefusedLogEvery) || !g.lastLog.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn("role port at its connection cap, refusing connections",
		zap.String("role", g.role), zap.Int64("max_connections", g.max.Load()), zap.Stringer("remote", remote))
}

// gateListener is a role's listener behind its connGate.
type gateListener struct {
	net.Listener
	g *connGate
}

// Accept returns the next connection the gate admits, closing those it
// refuses.
func (l *gateListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.g.admit() {
			return &gatedConn{Conn: httpfast.RawIO(c), g: l.g}, nil
		}
		l.g.refuse(c.RemoteAddr())
		_ = c.Close()
	}
}

// gatedConn is a client connection counted by its gate until its first
// Close.
type gatedConn struct {
	net.Conn
	g      *connGate
	closed atomic.Bool
}

func (c *gatedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.g.release()
	}
	return c.Conn.Close()
}

// NetConn is the connection under the gate (httpfast.SendAwait's socket).
func (c *gatedConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the connection (a TCP one), which the servers
// use to linger on a connection with unread request bytes.
func (c *gatedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
