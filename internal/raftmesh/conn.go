package raftmesh

import (
	"net"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/mesh"
)

// Conn is a raft stream as a net.Conn.
//
// Deadlines are quic-go's stream deadlines, all three supported: a Read
// or Write past its deadline fails with a net.Error whose Timeout is true.
// Close may run concurrently with Read and Write and unblocks both: it
// stops reading at once, and ends the write side cleanly (FIN, bytes
// written still delivered) unless a Write is in progress, which it then
// aborts (CodeClosed), as a mesh stream may not end cleanly under a
// concurrent Write.
type Conn struct {
	l      *Layer
	s      *mesh.Stream
	local  Addr
	remote remoteAddr
	// wmu is held by Write, and by Close while it ends the write side.
	wmu    sync.Mutex
	once   sync.Once
	closed chan struct{} // closed by Close
}

var _ net.Conn = (*Conn)(nil)

// remoteAddr is the peer's node id (kept as a field for SetVoters).
type remoteAddr struct{ id string }

func newConn(l *Layer, s *mesh.Stream, peer string) *Conn {
	return &Conn{l: l, s: s, local: Addr(l.self), remote: remoteAddr{peer}, closed: make(chan struct{})}
}

// Read reads from the peer.
func (c *Conn) Read(p []byte) (int, error) { return c.s.Read(p) }

// Write writes to the peer.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.s.Write(p)
}

// Close ends the stream (see Conn). It is safe to call more than once.
func (c *Conn) Close() error {
	c.once.Do(func() {
		c.s.StopReading(mesh.StreamCodeCancelled)
		if c.wmu.TryLock() {
			_ = c.s.CloseWrite()
			c.wmu.Unlock()
		} else {
			c.s.AbortWrite(CodeClosed)
		}
		c.l.forget(c)
		close(c.closed)
	})
	return nil
}

// LocalAddr is this node's id.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr is the peer's node id.
func (c *Conn) RemoteAddr() net.Addr { return Addr(c.remote.id) }

// SetDeadline sets the read and write deadlines; zero clears them.
func (c *Conn) SetDeadline(t time.Time) error { return c.s.SetDeadline(t) }

// SetReadDeadline sets the read deadline; zero clears it.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.s.SetReadDeadline(t) }

// SetWriteDeadline sets the write deadline; zero clears it.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.s.SetWriteDeadline(t) }
