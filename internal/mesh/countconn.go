package mesh

import (
	"net"
	"syscall"
	"time"
)

// countingConn is the mesh socket as handed to quic-go: it counts the
// bytes read and written. It keeps socket-buffer and syscall access (so
// quic-go sizes buffers and sets DF) but deliberately not the UDPConn's
// ReadMsgUDP/WriteMsgUDP, so every datagram passes ReadFrom and WriteTo.
type countingConn struct {
	c *net.UDPConn
	m *metrics
}

var _ net.PacketConn = (*countingConn)(nil)

func (c *countingConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, addr, err := c.c.ReadFrom(b)
	if n > 0 {
		c.m.rx.Add(float64(n))
	}
	return n, addr, err
}

func (c *countingConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	n, err := c.c.WriteTo(b, addr)
	if n > 0 {
		c.m.tx.Add(float64(n))
	}
	return n, err
}

func (c *countingConn) Close() error                       { return c.c.Close() }
func (c *countingConn) LocalAddr() net.Addr                { return c.c.LocalAddr() }
func (c *countingConn) SetDeadline(t time.Time) error      { return c.c.SetDeadline(t) }
func (c *countingConn) SetReadDeadline(t time.Time) error  { return c.c.SetReadDeadline(t) }
func (c *countingConn) SetWriteDeadline(t time.Time) error { return c.c.SetWriteDeadline(t) }
func (c *countingConn) SetReadBuffer(n int) error          { return c.c.SetReadBuffer(n) }
func (c *countingConn) SetWriteBuffer(n int) error         { return c.c.SetWriteBuffer(n) }
func (c *countingConn) SyscallConn() (syscall.RawConn, error) {
	return c.c.SyscallConn()
}
