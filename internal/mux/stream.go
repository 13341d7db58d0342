package mux

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Stream is one bidirectional exchange of a Session. It is a net.Conn:
// Read, Write, Close and the deadlines behave as a connection's (calls
// may come from several goroutines; concurrent Reads are served one after
// the other, as are concurrent Writes).
type Stream struct {
	s *Session

	// rmu serializes Reads and owns rtimer; wmu serializes Writes and
	// CloseWrite and owns wtimer. Each timer is made on the first wait
	// with a deadline and reused.
	rmu, wmu       sync.Mutex
	rtimer, wtimer *time.Timer

	// Guarded by s.mu:

	// rnotify and wnotify wake the stream's Read and Write waiters; cap 1
	// (see Session.wait). Each is made by the first waiter that blocks:
	// at one exchange in flight none does.
	rnotify, wnotify chan struct{}

	// id is 0 on a client's stream until its first frame is queued.
	id uint32
	// rbuf[roff:] is the data received and not yet read. unacked counts
	// the bytes read since the last WINDOW sent: the peer may have sent
	// Window - (len(rbuf)-roff) - unacked more.
	rbuf    []byte
	roff    int
	unacked int
	finRecv bool
	// sendWin is what the peer lets this side send.
	sendWin int64
	finSent bool
	// lastEpoch and lastOff locate the stream's last DATA frame in the
	// write queue, while it is there (lastEpoch == s.wqEpoch), so that
	// CloseWrite can set FIN on it instead of sending another frame.
	lastEpoch uint64
	lastOff   int
	hasLast   bool
	rdl, wdl  time.Time
	// reset is the peer's RESET; closed and ended record Close and End;
	// forgotten: the session no longer counts or knows the stream.
	reset     error
	closed    bool
	ended     bool
	forgotten bool
	accepted  bool
}

var _ net.Conn = (*Stream)(nil)

// ID returns the stream's id. On a client it is 0 until the stream's
// first frame is queued (by Write or CloseWrite).
func (st *Stream) ID() uint32 {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	return st.id
}

// Read reads data the peer sent. It returns io.EOF after the peer's FIN
// and the data before it, ErrReset (with the code) at once when the peer
// reset the stream, and the session's error once it ended. A Read with
// nothing buffered reads the connection itself when no other goroutine
// does (see the package doc).
func (st *Stream) Read(p []byte) (int, error) {
	st.rmu.Lock()
	defer st.rmu.Unlock()
	s := st.s
	for {
		s.mu.Lock()
		if err := st.readErrLocked(); err != nil {
			s.mu.Unlock()
			return 0, err
		}
		if st.roff < len(st.rbuf) {
			n := copy(p, st.rbuf[st.roff:])
			st.roff += n
			if st.roff == len(st.rbuf) {
				st.drained()
			}
			st.unacked += n
			mustFlush := false
			var err error
			if st.unacked >= s.cfg.Window/2 && !st.finRecv && s.err == nil {
				mustFlush, err = s.queueControlLocked(typeWindow, st.id, uint32(st.unacked))
				st.unacked = 0
			}
			dl := st.rdl
			s.mu.Unlock()
			if err != nil {
				s.fail(err)
			} else if mustFlush {
				s.flush(st, dl)
			}
			return n, nil
		}
		if st.finRecv {
			s.mu.Unlock()
			return 0, io.EOF
		}
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return 0, err
		}
		dl := st.rdl
		if !dl.IsZero() && !time.Now().Before(dl) {
			s.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		s.mu.Unlock()
		s.wait(st, waitRead, dl)
	}
}

// readErrLocked is the error a Read returns before looking at data.
func (st *Stream) readErrLocked() error {
	switch {
	case st.reset != nil:
		return st.reset
	case st.closed || st.ended:
		return errStreamClosed
	}
	return nil
}

// appendData adds p to the receive buffer. The buffer grows as data
// arrives, never past window (the dispatcher refused more), and is
// compacted before it grows.
func (st *Stream) appendData(s *Session, p []byte) {
	if len(st.rbuf)+len(p) > cap(st.rbuf) {
		unread := len(st.rbuf) - st.roff
		if unread+len(p) <= cap(st.rbuf) {
			copy(st.rbuf, st.rbuf[st.roff:])
		} else {
			grown := s.newBuf(min(max(2*cap(st.rbuf), unread+len(p), 512), s.cfg.Window))
			grown = append(grown, st.rbuf[st.roff:]...)
			s.freeBuf(st)
			st.rbuf = grown
		}
		st.rbuf, st.roff = st.rbuf[:unread], 0
	}
	st.rbuf = append(st.rbuf, p...)
}

// drained resets the receive buffer once it was read whole, dropping a
// large one: an idle stream keeps at most keepRecvBuf bytes.
func (st *Stream) drained() {
	if cap(st.rbuf) > keepRecvBuf {
		st.rbuf = nil
	} else {
		st.rbuf = st.rbuf[:0]
	}
	st.roff = 0
}

// Write queues p as DATA frames within the stream's send window, waiting
// while it is 0 or the write queue is full. It returns once its bytes are
// queued or written: a flusher writes them, maybe this goroutine (see the
// package doc). An error writing bytes already queued fails the session;
// it surfaces on a later call or as the session's error.
func (st *Stream) Write(p []byte) (int, error) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	s := st.s
	n := 0
	for {
		s.mu.Lock()
		if err := st.writeErrLocked(); err != nil {
			s.mu.Unlock()
			return n, err
		}
		queued := false
		for n < len(p) && st.sendWin > 0 {
			room := s.cfg.WriteQueue - s.queuedLocked() - headerLen
			if room <= 0 {
				break
			}
			k := min(len(p)-n, s.cfg.MaxFrame, int(st.sendWin), room)
			if err := s.queueDataLocked(st, p[n:n+k], 0); err != nil {
				s.mu.Unlock()
				return n, err
			}
			st.sendWin -= int64(k)
			n += k
			queued = true
		}
		mustFlush, succeed := false, false
		if queued {
			mustFlush = s.claimFlushLocked(st)
			if !mustFlush && s.handoff && !s.successor {
				s.handoff, s.successor, succeed = false, true, true
			}
		}
		kind := waitWindow
		if n < len(p) && st.sendWin > 0 {
			kind = waitSpace
			if !mustFlush && !succeed {
				// The channel exists before the flusher can look for it.
				if st.wnotify == nil {
					st.wnotify = make(chan struct{}, 1)
				}
				s.spaceWaiters = append(s.spaceWaiters, st)
			}
		}
		dl := st.wdl
		s.mu.Unlock()
		var err error
		if mustFlush {
			err = s.flush(st, dl)
		} else if succeed {
			err = s.succeed(st, dl)
		}
		if err != nil {
			return n, err
		}
		if n == len(p) {
			return n, nil
		}
		if mustFlush || succeed {
			continue // the queue was written: there is room again
		}
		s.wait(st, kind, dl)
	}
}

// writeErrLocked is the error a Write returns before queuing more.
func (st *Stream) writeErrLocked() error {
	s := st.s
	switch {
	case st.reset != nil:
		return st.reset
	case st.closed || st.ended:
		return errStreamClosed
	case s.err != nil:
		return s.err
	case st.finSent:
		return errWriteClosed
	case !st.wdl.IsZero() && !time.Now().Before(st.wdl):
		return os.ErrDeadlineExceeded
	}
	return nil
}

// queueDataLocked queues one DATA frame of st, giving a client's stream
// its id on its first frame: ids are thus queued, and reach the server,
// in increasing order.
func (s *Session) queueDataLocked(st *Stream, p []byte, flags uint8) error {
	if st.id == 0 {
		if s.nextID > maxStreamID {
			return errIDsExhausted
		}
		st.id = uint32(s.nextID)
		s.nextID += 2
		s.streams[st.id] = st
	}
	st.lastEpoch, st.lastOff, st.hasLast = s.wqEpoch, len(s.wq), true
	s.wq = appendHeader(s.wq, header{id: st.id, typ: typeData, flags: flags, length: uint16(len(p))})
	s.wq = append(s.wq, p...)
	return nil
}

// CloseWrite tells the peer this side sends no more: its Read returns
// io.EOF after the data. FIN is set on the stream's last DATA frame if it
// is still queued, else sent in an empty DATA frame.
func (st *Stream) CloseWrite() error {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	s := st.s
	s.mu.Lock()
	if err := st.writeErrLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	st.finSent = true
	notify(st.wnotify)
	if st.hasLast && st.lastEpoch == s.wqEpoch {
		s.wq[st.lastOff+5] |= flagFIN
		s.mu.Unlock()
		return nil // the flusher that owns the queue writes it
	}
	if err := s.queueDataLocked(st, nil, flagFIN); err != nil {
		s.mu.Unlock()
		return err
	}
	mustFlush := s.claimFlushLocked(st)
	dl := st.wdl
	s.mu.Unlock()
	if mustFlush {
		return s.flush(st, dl)
	}
	return nil
}

// Close ends the stream here. Unless it ended cleanly (both FINs seen) or
// the peer reset it, the peer gets RESET(cancel). Reads and Writes in
// progress return at once. Idempotent.
func (st *Stream) Close() error {
	s := st.s
	s.mu.Lock()
	if st.closed || st.ended {
		s.mu.Unlock()
		return nil
	}
	st.closed = true
	mustFlush := false
	var err error
	if !st.forgotten && st.id != 0 && !(st.finSent && st.finRecv) && s.err == nil {
		mustFlush, err = s.queueControlLocked(typeReset, st.id, codeCancel)
	}
	s.forgetLocked(st)
	dl := st.wdl
	s.mu.Unlock()
	if err != nil {
		s.fail(err)
	} else if mustFlush {
		s.flush(st, dl)
	}
	return nil
}

// End forgets the stream here and sends nothing: for a protocol above
// that knows the exchange is over on both sides. Frames the peer still
// sends for it are discarded. Reads and Writes in progress return at
// once; bytes already queued are still sent.
func (st *Stream) End() {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.closed || st.ended {
		return
	}
	st.ended = true
	s.forgetLocked(st)
}

// Alive reports whether the stream is usable: neither reset, closed,
// ended, nor its session done.
func (st *Stream) Alive() bool {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return st.reset == nil && !st.closed && !st.ended && s.err == nil
}

// LocalAddr returns the session's connection's local address.
func (st *Stream) LocalAddr() net.Addr { return st.s.conn.LocalAddr() }

// RemoteAddr returns the session's connection's remote address.
func (st *Stream) RemoteAddr() net.Addr { return st.s.conn.RemoteAddr() }

// SetDeadline sets the read and write deadlines.
func (st *Stream) SetDeadline(t time.Time) error {
	st.SetReadDeadline(t)
	return st.SetWriteDeadline(t)
}

// SetReadDeadline sets the deadline of Reads, the one in progress
// included: past it they return os.ErrDeadlineExceeded and the stream
// stays usable. The zero time means none.
func (st *Stream) SetReadDeadline(t time.Time) error {
	s := st.s
	s.mu.Lock()
	st.rdl = t
	s.kickLocked(st)
	notify(st.rnotify)
	s.mu.Unlock()
	return nil
}

// SetWriteDeadline sets the deadline of Writes, the one in progress
// included. A Write that waits (for window or queue space) returns
// os.ErrDeadlineExceeded past it and the stream stays usable; one whose
// deadline passes while it writes the connection fails the session (a
// frame may be cut).
func (st *Stream) SetWriteDeadline(t time.Time) error {
	s := st.s
	s.mu.Lock()
	st.wdl = t
	s.kickLocked(st)
	if s.flushing && s.flusher == st && s.inflight > 0 {
		s.connWD = t
		s.conn.SetWriteDeadline(t)
	}
	notify(st.wnotify)
	s.mu.Unlock()
	return nil
}
