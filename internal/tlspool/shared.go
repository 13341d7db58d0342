package tlspool

import (
	"crypto/tls"
	"net"

	"github.com/nodeld/nodeld/internal/mux"
)

// sharedConn is a TLS connection to a peer that carries exchanges as
// streams (internal/mux), each reused from exchange to exchange as a
// connection of its own is: under load, 64 exchanges in flight go over
// a few connections whose writes coalesce, where 64 connections would
// each take a system call, and a wake-up of the peer, per write.
type sharedConn struct {
	s   *mux.Session
	tc  *tls.Conn
	key string // the peer's key, as the pool's map key (each stream's Conn.key)
	// streams are its streams, in use and idle (guarded by the pool's
	// mu): the last one's close closes it.
	streams int
}

func (sc *sharedConn) done() bool {
	select {
	case <-sc.s.Done():
		return true
	default:
		return false
	}
}

// close closes the connection: its streams fail at once.
func (sc *sharedConn) close() { _ = sc.s.Close() }

// newShared makes tc, just dialed and admitted, a shared connection, and
// returns its first stream.
func (p *Pool) newShared(tc *tls.Conn, raw net.Conn) (*Conn, error) {
	s, err := mux.Client(tc, p.cfg.Mux)
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	st, err := s.Open()
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	sc := &sharedConn{s: s, tc: tc, streams: 1}
	return &Conn{Conn: st, tc: tc, st: st, sc: sc, slot: -1}, nil
}

// openStreamLocked opens a stream on pc's shared connection with the
// fewest, unless another is to be dialed beside it (every one has
// StreamsPerShared already and fewer than SharedPerPeer are open or
// dialing) or none can take one: then c is nil. A shared connection
// found ended is taken out and returned as dead, for the caller to close
// (outside the lock) before it calls again. p.mu must be held.
func (p *Pool) openStreamLocked(pc *peerConns) (c *Conn, dead *sharedConn) {
	if len(pc.shared) == 0 || pc.open >= p.cfg.MaxConnsPerPeer {
		return nil, nil
	}
	var best *sharedConn
	for _, sc := range pc.shared {
		if sc.done() {
			pc.shared = removeShared(pc.shared, sc)
			return nil, sc
		}
		if best == nil || sc.streams < best.streams {
			best = sc
		}
	}
	if best.streams >= p.cfg.StreamsPerShared && len(pc.shared)+pc.dialing < p.cfg.SharedPerPeer {
		return nil, nil
	}
	st, err := best.s.Open()
	if err != nil {
		// Its streams are at their limit (the caller dials, or the pool
		// is full), or it ended just now.
		if best.done() {
			pc.shared = removeShared(pc.shared, best)
			return nil, best
		}
		return nil, nil
	}
	best.streams++
	c = &Conn{Conn: st, tc: best.tc, st: st, sc: best, key: best.key, pool: p, slot: -1, placed: true, pc: pc}
	pc.open++
	pc.takeLocked(c)
	return c, nil
}

func removeShared(all []*sharedConn, sc *sharedConn) []*sharedConn {
	for i, s := range all {
		if s == sc {
			copy(all[i:], all[i+1:])
			all[len(all)-1] = nil
			return all[:len(all)-1]
		}
	}
	return all
}

// streamEndedLocked counts c's stream out of its shared connection, and
// returns the connection when that was its last stream, for the caller
// to close: a shared connection lives as long as a stream on it. p.mu
// must be held.
func (p *Pool) streamEndedLocked(c *Conn, pc *peerConns) *sharedConn {
	sc := c.sc
	if sc.streams--; sc.streams > 0 {
		return nil
	}
	pc.shared = removeShared(pc.shared, sc)
	return sc
}
