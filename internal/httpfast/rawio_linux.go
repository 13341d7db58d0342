package httpfast

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// RawIO returns c reading and writing its socket with system calls that
// keep the goroutine's P (syscall.RawSyscall through the connection's
// syscall.RawConn), where net's Read and Write release it for the call.
//
// The socket is non-blocking, so a call never waits in the kernel: what
// it costs is the kernel's work for these bytes, which on loopback
// includes delivering them to the reader. Releasing the P for that work
// is what makes a busy proxy slow: the runtime's monitor takes the P of
// a call that runs past its 20 µs tick and hands it to another thread,
// and the goroutine, back from its call, finds its P gone and its thread
// put to sleep; each such hand-off is a wake-up and a context switch,
// and the monitor, finding a P to take on each tick, keeps ticking every
// 20 µs. Waiting (EAGAIN) is the poller's, as in net: deadlines, Close
// and the readiness of the descriptor behave as they do there.
//
// Each call moves at most rawChunkBytes, so that a goroutine holds its P
// (and a stop of the world waits for it) only as long as copying that
// much takes.
//
// c is returned as it is unless it is a *net.TCPConn.
func RawIO(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawConn{TCPConn: tc, rc: rc}
	r.readFn = r.read
	r.vecFn = r.writev
	r.peekFn = r.peek
	r.awaitFn = r.await
	return r
}

// rawConn is a TCP connection whose Read and Write are RawIO's. Its
// other methods (deadlines, Close, CloseWrite, addresses) are the
// *net.TCPConn's, and so are ReadFrom and WriteTo: io.Copy to or from it
// uses net's calls (or splice), correct on the same descriptor, only not
// raw.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu     sync.Mutex // one Read at a time owns rbuf, rn, rerr
	rbuf    []byte
	rn      int
	rerr    syscall.Errno
	readFn  func(fd uintptr) bool
	pb      [1]byte // peek's buffer, under rmu
	palive  bool    // peek's finding, under rmu
	peekFn  func(fd uintptr) bool
	empty   atomic.Int64 // reads that found nothing (EAGAIN) and waited
	send    Sender       // SendAwait's, under rmu; nil once it ran
	serr    error        // what send returned
	awaitFn func(fd uintptr) bool

	wmu sync.Mutex // one write at a time owns one, wv, wn, iov, werr, corked
	one [1][]byte  // Write's buffer, as writev's one
	// corked holds the bytes Write was given while WriteCorked runs, to
	// be written at its end in one call; nil when not corked.
	corked *[]byte
	wv     [][]byte // the buffers not yet written
	wn     int
	iov    [4]syscall.Iovec
	werr   syscall.Errno
	vecFn  func(fd uintptr) bool
}

// rawChunkBytes bounds the bytes one raw system call reads or writes.
const rawChunkBytes = 256 << 10

func (c *rawConn) read(fd uintptr) bool {
	b := c.rbuf
	if len(b) > rawChunkBytes {
		b = b[:rawChunkBytes]
	}
	for {
		n, e := sysRead(fd, b)
		switch e {
		case 0:
			c.rn = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			c.empty.Add(1)
			return false
		default:
			c.rerr = e
			return true
		}
	}
}

// alive is ConnAlive for a RawIO connection: the same peek, through the
// connection's own RawConn and a method value made once, so a pool's
// check of a reused connection allocates nothing.
func (c *rawConn) alive() bool {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.palive = false
	err := c.rc.Read(c.peekFn)
	return err == nil && c.palive
}

func (c *rawConn) peek(fd uintptr) bool {
	c.palive = sysPeek(fd, c.pb[:]) == syscall.EAGAIN
	return true // never wait for readiness
}

// rawUnder returns the RawIO connection c is or wraps (through NetConn, as
// *tls.Conn has), or nil.
func rawUnder(c net.Conn) *rawConn {
	for range 4 {
		if rc, ok := c.(*rawConn); ok {
			return rc
		}
		u, wraps := c.(interface{ NetConn() net.Conn })
		if !wraps {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}

// corkBuffers hold what a corked connection was given.
var corkBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 80<<10); return &b }}

// WriteCorked runs write, which writes to c, holding every write to the
// socket under c (a RawIO connection, or one that wraps it) in memory
// until write returns, then writes them all in one system call. A TLS
// connection writes each record of at most 16 KiB with a call of its
// own: a 64 KiB chunk is four writes, and on loopback four deliveries
// that each wake the reader. Corked, it is one. What write's writes were
// given is written even when write fails, in order; the error is
// write's, else the socket's. On another connection it is write().
func WriteCorked(c net.Conn, write func() error) error {
	rc := rawUnder(c)
	if rc == nil {
		return write()
	}
	buf := corkBuffers.Get().(*[]byte)
	rc.wmu.Lock()
	rc.corked = buf
	rc.wmu.Unlock()
	err := write()
	rc.wmu.Lock()
	defer rc.wmu.Unlock()
	held := *rc.corked
	rc.corked = nil
	var werr error
	if len(held) > 0 {
		_, werr = rc.writeOneLocked(held)
	}
	if cap(held) <= 256<<10 {
		*buf = held[:0]
		corkBuffers.Put(buf)
	}
	if err == nil {
		err = werr
	}
	return err
}

// SendAwait runs send's Send, which writes a request on c, and returns once c
// has something to read (its answer), or its read deadline passed, or it
// was closed: whatever a Read would then find. On a RawIO connection
// both happen in one poller window (one syscall.RawConn Read): the
// readiness the poller keeps is reset before send writes, so the answer's
// arrival, however soon, ends the wait, and the Read after it finds the
// answer. A plain Read right after a write would, instead, find nothing
// (EAGAIN) and then wait: one system call a request fewer. send must not
// read c. A connection that wraps another (NetConn, as *tls.Conn has)
// waits on the one under it; nothing must be buffered above the socket
// then (a TLS record read ahead), or the wait misses it. The error is
// send's.
func SendAwait(c net.Conn, send Sender) error {
	// A wrapper that says what it wraps (a TLS connection, a gate): the
	// wait is on the socket under it, whatever send writes with.
	rc := rawUnder(c)
	if rc == nil {
		return send.Send()
	}
	rc.rmu.Lock()
	defer rc.rmu.Unlock()
	rc.send, rc.serr = send, nil
	_ = rc.rc.Read(rc.awaitFn) // a wait's failure is the next Read's
	rc.send = nil
	return rc.serr
}

// await is SendAwait's call in the window: send first; then, woken by
// the poller, done.
func (c *rawConn) await(uintptr) bool {
	if c.send == nil {
		return true
	}
	send := c.send
	c.send = nil
	c.serr = send.Send()
	return c.serr != nil
}

// writev writes c.wv with writev(2), as many buffers at once as iov
// holds, consuming what it wrote.
func (c *rawConn) writev(fd uintptr) bool {
	for len(c.wv) > 0 {
		if len(c.wv[0]) == 0 {
			c.wv = c.wv[1:]
			continue
		}
		k, total := 0, 0
		for _, b := range c.wv {
			if k == len(c.iov) || total == rawChunkBytes {
				break
			}
			b = b[:min(len(b), rawChunkBytes-total)]
			if len(b) > 0 {
				c.iov[k] = syscall.Iovec{Base: unsafe.SliceData(b)}
				c.iov[k].SetLen(len(b))
				total += len(b)
				k++
			}
		}
		n, e := sysWritev(fd, c.iov[:k])
		clear(c.iov[:k])
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			c.werr = e
			return true
		}
		c.wn += n
		for n > 0 {
			if n >= len(c.wv[0]) {
				n -= len(c.wv[0])
				c.wv = c.wv[1:]
				continue
			}
			c.wv[0] = c.wv[0][n:]
			n = 0
		}
	}
	return true
}

// writeBuffers writes every buffer of v, in order, in as few system
// calls as it can, as net.Buffers' WriteTo does, consuming v.
func (c *rawConn) writeBuffers(v *net.Buffers) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.corked != nil {
		var n int64
		for _, b := range *v {
			*c.corked = append(*c.corked, b...)
			n += int64(len(b))
		}
		*v = nil
		return n, nil
	}
	n, err := c.writevLocked("writev", *v)
	*v, c.wv = c.wv, nil
	return int64(n), err
}

// writevLocked writes bufs (consuming c.wv, which it starts from), and
// reports a failure as op's. c.wmu must be held.
func (c *rawConn) writevLocked(op string, bufs [][]byte) (int, error) {
	c.wv, c.wn, c.werr = bufs, 0, 0
	err := c.rc.Write(c.vecFn)
	switch {
	case err != nil:
		return c.wn, c.opError(op, unwrapOp(err))
	case c.werr != 0:
		return c.wn, c.opError(op, os.NewSyscallError(op, c.werr))
	}
	return c.wn, nil
}

// Read reads as net.Conn's Read does: io.EOF at the end, the poller's
// error (a deadline, a closed connection) as net's.
func (c *rawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rbuf, c.rn, c.rerr = b, 0, 0
	err := c.rc.Read(c.readFn)
	c.rbuf = nil
	switch {
	case err != nil:
		return 0, c.opError("read", unwrapOp(err))
	case c.rerr != 0:
		return 0, c.opError("read", os.NewSyscallError("read", c.rerr))
	case c.rn == 0:
		return 0, io.EOF
	}
	return c.rn, nil
}

// Write writes all of b or fails, as net.Conn's Write does: writev of
// one buffer, so that one loop writes both.
func (c *rawConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.corked != nil {
		*c.corked = append(*c.corked, b...)
		return len(b), nil
	}
	return c.writeOneLocked(b)
}

// writeOneLocked writes b as writev's one buffer. c.wmu is held.
func (c *rawConn) writeOneLocked(b []byte) (int, error) {
	c.one[0] = b
	n, err := c.writevLocked("write", c.one[:])
	c.one[0], c.wv = nil, nil
	return n, err
}

func (c *rawConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// unwrapOp takes the poller's error out of the *net.OpError the raw
// connection wraps it in ("raw-read"), so that callers see net's.
func unwrapOp(err error) error {
	if oe, ok := err.(*net.OpError); ok {
		return oe.Err
	}
	return err
}

// writeBuffers writes v to c: with RawIO's writev when c is RawIO's,
// else as net.Buffers does.
func writeBuffers(c net.Conn, v *net.Buffers) (int64, error) {
	if rc, ok := c.(*rawConn); ok {
		return rc.writeBuffers(v)
	}
	return v.WriteTo(c)
}
