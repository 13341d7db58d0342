package mux

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"
)

// Session carries streams over one connection. It starts no goroutine:
// the callers of its streams read and write the connection themselves (see
// the package doc and pump and flush).
type Session struct {
	conn   net.Conn
	cfg    Config
	client bool

	// br is read only by the goroutine that holds the read token.
	br *bufio.Reader

	// token holds a value while the read token is free. It is also how a
	// waiter is woken to take it: every waiter that may read selects on it
	// (see wait).
	token chan struct{}
	// done is closed when the session ends (err set).
	done chan struct{}
	// baton passes the flush from a flusher to the successor it was
	// asked to hand over to (see flush).
	baton chan struct{}
	// acceptNotify wakes an Accept waiter when a stream is queued.
	acceptNotify chan struct{}

	// mu guards everything below. It is never held across a read or a
	// write of conn; it is held across conn's Set*Deadline calls, which
	// do no I/O.
	mu sync.Mutex
	// err is why the session ended; nil while it is open.
	err error
	// streams holds the open streams that have an id.
	streams map[uint32]*Stream
	// open counts the open streams, a client's not yet sent ones included.
	open int
	// nextID is, on a client, the id the next stream that sends gets; on a
	// server, the id a new stream must have. Every id below it was used.
	nextID uint64
	// acceptQ holds the streams the peer opened, not yet accepted.
	acceptQ []*Stream

	// reader is the stream the read token's holder reads for (nil for
	// Accept); kicked says its connection deadline was moved to wake it.
	reader     *Stream
	readerKind waitKind
	kicked     bool
	// connRD and connWD are the read and write deadlines set on conn.
	connRD, connWD time.Time

	// wq is the write queue: encoded frames not yet taken by a flusher.
	// inflight counts the bytes a flusher is writing; spare is the
	// buffer it gives back. wqEpoch counts the batches taken.
	wq       []byte
	spare    []byte
	inflight int
	wqEpoch  uint64
	// flushing: a flusher owns the queue; every frame queued while it
	// is true will be written by it or its successor. flusher is its
	// stream (for SetWriteDeadline), if any.
	flushing bool
	flusher  *Stream
	// handoff: the flusher has written its own bytes and maxFlushRounds
	// more; the next writer that queues becomes its successor. successor:
	// one has, and waits for the baton.
	handoff, successor bool
	// spaceWaiters are the streams whose Write waits for queue space.
	spaceWaiters []*Stream
	// freeBufs are receive buffers of forgotten streams (at most
	// maxFreeBufs, each of at most keepRecvBuf), for new streams: an
	// exchange then allocates no buffer for its data.
	freeBufs [][]byte
}

// Client starts the client side of a session on c: it opens streams.
func Client(c net.Conn, cfg Config) (*Session, error) { return newSession(c, cfg, true) }

// Server starts the server side of a session on c: it accepts streams.
func Server(c net.Conn, cfg Config) (*Session, error) { return newSession(c, cfg, false) }

func newSession(c net.Conn, cfg Config, client bool) (*Session, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Session{
		conn:         c,
		cfg:          cfg,
		client:       client,
		br:           bufio.NewReaderSize(c, max(4096, cfg.MaxFrame+headerLen)),
		token:        make(chan struct{}, 1),
		done:         make(chan struct{}),
		baton:        make(chan struct{}, 1),
		acceptNotify: make(chan struct{}, 1),
		streams:      make(map[uint32]*Stream),
		nextID:       1,
	}
	s.token <- struct{}{}
	return s, nil
}

// Open opens a stream. Nothing is sent until its first Write or
// CloseWrite, which also gives it its id: ids then reach the server in
// increasing order whatever order streams first send in.
func (s *Session) Open() (*Stream, error) {
	if !s.client {
		return nil, errNotClient
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	if s.open >= s.cfg.MaxStreams {
		return nil, ErrTooManyStreams
	}
	if s.nextID > maxStreamID {
		return nil, errIDsExhausted
	}
	s.open++
	return s.newStream(0), nil
}

// Accept returns the next stream the peer opened.
func (s *Session) Accept() (*Stream, error) {
	if s.client {
		return nil, errNotServer
	}
	for {
		s.mu.Lock()
		if len(s.acceptQ) > 0 {
			st := s.acceptQ[0]
			s.acceptQ[0] = nil
			s.acceptQ = s.acceptQ[1:]
			st.accepted = true
			if len(s.acceptQ) > 0 {
				notify(s.acceptNotify) // for another Accept
			}
			s.mu.Unlock()
			return st, nil
		}
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return nil, err
		}
		s.mu.Unlock()
		s.wait(nil, waitAccept, time.Time{})
	}
}

// Streams returns how many streams are open now.
func (s *Session) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Close ends the session and closes its connection: every stream's calls
// and Accept fail with ErrSessionClosed. It is idempotent.
func (s *Session) Close() error {
	s.fail(ErrSessionClosed)
	return nil
}

// Done is closed when the session ends.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns why the session ended, nil while it is open. It wraps
// ErrSessionClosed and the cause (ErrProtocol, a connection error).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// fail ends the session with err (wrapped in ErrSessionClosed if it is
// not already), wakes every waiter and closes the connection. The first
// cause wins.
func (s *Session) fail(err error) {
	if !errors.Is(err, ErrSessionClosed) {
		err = fmt.Errorf("%w: %w", ErrSessionClosed, err)
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	close(s.done)
	s.mu.Unlock()
	s.conn.Close()
}

// newStream returns a stream with id (0 for a client's stream not yet
// sent); the caller counted it in open and, with an id, puts it in
// streams.
func (s *Session) newStream(id uint32) *Stream {
	return &Stream{s: s, id: id, sendWin: int64(s.cfg.Window)}
}

// forgetLocked removes st from the session: it no longer counts as open,
// and later frames for its id are discarded.
func (s *Session) forgetLocked(st *Stream) {
	if st.forgotten {
		return
	}
	st.forgotten = true
	s.open--
	s.freeBuf(st)
	if st.id != 0 {
		delete(s.streams, st.id)
	}
	if !s.client && !st.accepted {
		for i, q := range s.acceptQ {
			if q == st {
				s.acceptQ = append(s.acceptQ[:i], s.acceptQ[i+1:]...)
				break
			}
		}
	}
	notify(st.rnotify)
	notify(st.wnotify)
	s.kickLocked(st)
}

// kickLocked wakes the read token's holder if it reads for st, by moving
// the connection's read deadline to the past: its read returns a timeout
// (which leaves the connection usable), and it re-checks what it waits
// for. It is how a Close, End or new deadline reaches a goroutine blocked
// in conn.Read.
func (s *Session) kickLocked(st *Stream) {
	if st == nil || s.reader != st {
		return
	}
	s.kicked = true
	s.conn.SetReadDeadline(aLongTimeAgo)
}

// aLongTimeAgo is a deadline in the past.
var aLongTimeAgo = time.Unix(1, 0)

// notify wakes the one waiter of a cap-1 channel, if it is not already
// woken. A nil channel (a stream none waited on yet) is a no-op.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// waitKind is what a waiter needs.
type waitKind uint8

const (
	waitRead   waitKind = iota // data, FIN or an end on the stream
	waitWindow                 // send window on the stream, or an end
	waitSpace                  // room in the write queue (never reads)
	waitAccept                 // a new stream
)

// metLocked reports whether what kind waits for on st has happened, or
// the wait is moot (the stream or session ended).
func (s *Session) metLocked(st *Stream, kind waitKind) bool {
	if s.err != nil {
		return true
	}
	switch kind {
	case waitRead:
		return st.roff < len(st.rbuf) || st.finRecv || st.reset != nil || st.forgotten
	case waitWindow:
		return st.sendWin > 0 || st.finSent || st.reset != nil || st.forgotten
	case waitAccept:
		return len(s.acceptQ) > 0
	}
	return true
}

// wait blocks until something that may satisfy kind happened, then
// returns; the caller re-checks under mu and calls wait again if not.
// The caller checked its condition under mu before calling.
//
// The read token and the lost wake-up: a goroutine that needs a frame
// first checks its condition under mu, then tries the token, then blocks
// in one select on its own notify channel and the token channel. The
// dispatcher changes a stream's state under mu and then notifies its
// channel (cap 1): a change after the check leaves a value there, so the
// select returns. A releaser puts the token back into the channel (cap 1,
// empty while held, so the send never blocks): if a waiter is blocked in
// the select, the runtime hands it the token and wakes it; if none is yet,
// the token stays in the channel and the next waiter's select takes it.
// The token channel is thus both the token and the "wake one waiter"
// channel, and no waiter count is needed: registering is being in the
// select, and a waiter retries the token in that same select before it
// sleeps.
func (s *Session) wait(st *Stream, kind waitKind, dl time.Time) {
	var tokenC chan struct{}
	if kind != waitSpace {
		tokenC = s.token
		select {
		case <-tokenC:
			s.pump(st, kind)
			return
		default:
		}
	}
	// A stream's notify channels are made by its first waiter that
	// blocks, under mu: a change the dispatcher made before the channel
	// existed notified nobody, so the condition is checked again under
	// the same lock.
	var notifyC chan struct{}
	var timer **time.Timer
	switch kind {
	case waitRead, waitWindow, waitSpace:
		s.mu.Lock()
		if kind != waitSpace && s.metLocked(st, kind) {
			s.mu.Unlock()
			return
		}
		if kind == waitRead {
			if st.rnotify == nil {
				st.rnotify = make(chan struct{}, 1)
			}
			notifyC, timer = st.rnotify, &st.rtimer
		} else {
			if st.wnotify == nil {
				st.wnotify = make(chan struct{}, 1)
			}
			notifyC, timer = st.wnotify, &st.wtimer
		}
		s.mu.Unlock()
	case waitAccept:
		notifyC = s.acceptNotify
	}
	var timerC <-chan time.Time
	if !dl.IsZero() {
		// One timer per stream and direction, made on the first wait with
		// a deadline; the direction's mutex (rmu, wmu) makes its waiter
		// its only user.
		d := time.Until(dl)
		if d <= 0 {
			return
		}
		if *timer == nil {
			*timer = time.NewTimer(d)
		} else {
			(*timer).Reset(d)
		}
		defer (*timer).Stop()
		timerC = (*timer).C
	}
	select {
	case <-notifyC:
	case <-tokenC:
		s.pump(st, kind)
	case <-timerC:
	case <-s.done:
	}
}

// pump runs with the read token held: it reads and dispatches frames
// until what kind waits for on st has happened and no complete frame is
// left in the read buffer (it never blocks for more once its need is
// met), or its deadline passes, or the session ends, or the dispatch
// queued a frame this goroutine must write (RESET refused). Then it gives
// the token back and writes that frame; its caller waits again if need
// be.
func (s *Session) pump(st *Stream, kind waitKind) {
	mustFlush := false
	for {
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			break
		}
		var dl time.Time
		switch kind {
		case waitRead:
			dl = st.rdl
		case waitWindow:
			dl = st.wdl
		}
		if s.metLocked(st, kind) || mustFlush {
			// A frame the dispatch queued (RESET refused) is written
			// before this goroutine blocks again, and with the token
			// given back, so that another waiter reads meanwhile.
			if !s.frameBuffered() {
				s.mu.Unlock()
				break
			}
		} else if !dl.IsZero() && !time.Now().Before(dl) {
			s.mu.Unlock()
			break
		}
		s.reader, s.readerKind = st, kind
		if s.kicked || !dl.Equal(s.connRD) {
			s.kicked = false
			s.connRD = dl
			s.conn.SetReadDeadline(dl)
		}
		s.mu.Unlock()
		flush, err := s.readFrame()
		mustFlush = mustFlush || flush
		if err != nil {
			if !isTimeout(err) {
				s.fail(err)
			}
			break
		}
	}
	s.mu.Lock()
	s.reader, s.readerKind = nil, waitSpace // waitSpace: no reader
	s.mu.Unlock()
	s.token <- struct{}{}
	if mustFlush {
		s.flush(nil, time.Time{})
	}
}

// frameBuffered reports whether a whole frame (or a header too bad to
// wait for its payload) is in the read buffer. Token holder only.
func (s *Session) frameBuffered() bool {
	n := s.br.Buffered()
	if n < headerLen {
		return false
	}
	b, _ := s.br.Peek(headerLen)
	length := int(b[6])<<8 | int(b[7])
	return length > s.cfg.MaxFrame || n >= headerLen+length
}

// readFrame reads one frame and dispatches it. A timeout leaves the
// bytes read so far buffered (bufio's Peek consumes nothing), so the next
// holder resumes the frame. mustFlush says the dispatch queued a frame
// this goroutine must write (it became the flusher). Token holder only.
func (s *Session) readFrame() (mustFlush bool, err error) {
	b, err := s.br.Peek(headerLen)
	if err != nil {
		return false, s.readErr(err)
	}
	h := parseHeader(b)
	if err := h.check(s.cfg.MaxFrame); err != nil {
		return false, err
	}
	n := headerLen + int(h.length)
	if b, err = s.br.Peek(n); err != nil {
		return false, s.readErr(err)
	}
	s.mu.Lock()
	mustFlush, err = s.dispatchLocked(h, b[headerLen:])
	s.mu.Unlock()
	s.br.Discard(n)
	return mustFlush, err
}

// readErr names a read error: an EOF inside a frame is unexpected.
func (s *Session) readErr(err error) error {
	if isTimeout(err) {
		return err
	}
	if err == io.EOF && s.br.Buffered() > 0 {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read: %w", err)
}

// dispatchLocked applies one frame whose header passed check. It copies
// the payload (which is the read buffer's) if it keeps it.
func (s *Session) dispatchLocked(h header, payload []byte) (mustFlush bool, err error) {
	st := s.streams[h.id]
	if st == nil {
		if h.id%2 == 0 {
			return false, fmt.Errorf("%w: %s on even stream id %d (clients open odd ids)", ErrProtocol, typeName(h.typ), h.id)
		}
		if uint64(h.id) < s.nextID {
			return false, nil // a stream that ended: discard
		}
		if s.client {
			return false, fmt.Errorf("%w: %s on stream %d, which this client never opened", ErrProtocol, typeName(h.typ), h.id)
		}
		if uint64(h.id) != s.nextID {
			return false, fmt.Errorf("%w: new stream %d out of order (want %d: ids are used in order)", ErrProtocol, h.id, s.nextID)
		}
		if h.typ != typeData {
			return false, fmt.Errorf("%w: %s on stream %d, which was never opened", ErrProtocol, typeName(h.typ), h.id)
		}
		s.nextID += 2
		if s.open >= s.cfg.MaxStreams {
			return s.queueControlLocked(typeReset, h.id, codeRefused)
		}
		st = s.newStream(h.id)
		s.streams[h.id] = st
		s.open++
		s.acceptQ = append(s.acceptQ, st)
		// An Accept that holds the token takes the first new stream
		// itself when it stops reading: waking another Accept for it
		// would hand the stream to another goroutine for nothing.
		if !(s.readerKind == waitAccept && len(s.acceptQ) == 1) {
			notify(s.acceptNotify)
		}
	}
	switch h.typ {
	case typeData:
		if st.finRecv {
			return false, fmt.Errorf("%w: DATA on stream %d after its FIN", ErrProtocol, h.id)
		}
		if len(payload) > s.cfg.Window-(len(st.rbuf)-st.roff)-st.unacked {
			return false, fmt.Errorf("%w: DATA on stream %d past its window: %d bytes, %d allowed", ErrProtocol, h.id, len(payload), s.cfg.Window-(len(st.rbuf)-st.roff)-st.unacked)
		}
		st.appendData(s, payload)
		if h.flags&flagFIN != 0 {
			st.finRecv = true
		}
		notify(st.rnotify)
	case typeWindow:
		inc := int64(uint32(payload[0])<<24 | uint32(payload[1])<<16 | uint32(payload[2])<<8 | uint32(payload[3]))
		if inc == 0 {
			return false, fmt.Errorf("%w: WINDOW of 0 on stream %d", ErrProtocol, h.id)
		}
		if st.sendWin+inc > maxSendWindow {
			return false, fmt.Errorf("%w: WINDOW on stream %d grows it past %d bytes", ErrProtocol, h.id, maxSendWindow)
		}
		st.sendWin += inc
		notify(st.wnotify)
	case typeReset:
		code := uint32(payload[0])<<24 | uint32(payload[1])<<16 | uint32(payload[2])<<8 | uint32(payload[3])
		st.reset = resetError{code: code}
		s.forgetLocked(st)
	}
	return false, nil
}

// queueControlLocked queues a WINDOW or RESET frame. Control frames do
// not wait for queue space (the dispatcher cannot wait), but they may
// take at most another WriteQueue bytes: past that the peer reads
// nothing while making us answer, and the session fails. mustFlush says
// the caller became the flusher and must call flush once it unlocked.
func (s *Session) queueControlLocked(typ uint8, id, v uint32) (mustFlush bool, err error) {
	if s.queuedLocked()+headerLen+controlLen > 2*s.cfg.WriteQueue {
		return false, fmt.Errorf("%w: write queue over %d bytes: the peer does not read", ErrProtocol, 2*s.cfg.WriteQueue)
	}
	s.wq = appendHeader(s.wq, header{id: id, typ: typ, length: controlLen})
	s.wq = append(s.wq, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	return s.claimFlushLocked(nil), nil
}

// queuedLocked returns the bytes queued and being written.
func (s *Session) queuedLocked() int { return len(s.wq) + s.inflight }

// claimFlushLocked makes the caller the flusher if there is none; it must
// then call flush once it unlocked. Every frame queued is followed by
// this call under the same lock, so a queued frame always has a flusher.
func (s *Session) claimFlushLocked(st *Stream) bool {
	if s.flushing {
		return false
	}
	s.flushing = true
	s.flusher = st
	return true
}

// flush writes the queue, in one conn.Write per batch, until it is empty
// or the flush is handed to a successor. The caller is the flusher
// (claimFlushLocked). Others queue while it writes: that is the
// coalescing. After its own bytes (the first batch) and maxFlushRounds
// more, the flusher sets handoff; the next writer that queues becomes its
// successor and takes over at the next batch (the baton), so no goroutine
// writes for others forever. A write error fails the session. dl is the
// caller's deadline for its write: the connection cannot be left
// mid-frame, so a flush that times out fails the session too.
func (s *Session) flush(st *Stream, dl time.Time) error {
	rounds := 0
	// The flusher yields the processor once before its first write: the
	// goroutines ready to run (under load, those of other streams, woken
	// by the same read) queue their frames meanwhile, and this write
	// carries them all, where each would otherwise write on its own
	// (measured on the mesh hop at c=64: 2.07 writes a request on each
	// side without the yield, 1.26 with, and 13% less CPU a request).
	// With nothing else ready, the yield returns at once.
	runtime.Gosched()
	for {
		s.mu.Lock()
		if s.successor {
			s.successor = false
			s.flusher = nil
			s.mu.Unlock()
			s.baton <- struct{}{}
			return nil
		}
		if len(s.wq) == 0 || s.err != nil {
			s.flushing, s.handoff, s.flusher = false, false, nil
			err := s.err
			s.mu.Unlock()
			return err
		}
		if rounds > maxFlushRounds {
			s.handoff = true
		}
		batch := s.wq
		s.wq, s.spare = s.spare[:0], nil
		s.inflight = len(batch)
		s.wqEpoch++
		s.flusher = st
		if !dl.Equal(s.connWD) {
			s.connWD = dl
			s.conn.SetWriteDeadline(dl)
		}
		s.mu.Unlock()

		_, err := s.conn.Write(batch)

		s.mu.Lock()
		s.inflight = 0
		if cap(batch) <= keepWriteBuf {
			s.spare = batch[:0]
		}
		for i, w := range s.spaceWaiters {
			notify(w.wnotify)
			s.spaceWaiters[i] = nil
		}
		s.spaceWaiters = s.spaceWaiters[:0]
		s.mu.Unlock()
		if err != nil {
			s.fail(fmt.Errorf("write: %w", err))
		}
		rounds++
	}
}

// succeed waits for the baton from the flusher it is the successor of,
// then flushes. If its deadline passes first and the baton was not yet
// passed, it gives up the succession (its bytes are queued: the current
// flusher will write them).
func (s *Session) succeed(st *Stream, dl time.Time) error {
	var timerC <-chan time.Time
	if !dl.IsZero() {
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		timerC = t.C
	}
	select {
	case <-s.baton:
		return s.flush(st, dl)
	case <-s.done:
		return s.Err()
	case <-timerC:
		s.mu.Lock()
		if s.successor {
			s.successor = false
			s.handoff = true
			s.mu.Unlock()
			return nil
		}
		s.mu.Unlock()
		<-s.baton // passed already, or about to be
		return s.flush(st, dl)
	}
}

// freeBuf takes st's receive buffer for another stream if it is small and
// the free list has room.
func (s *Session) freeBuf(st *Stream) {
	if b := st.rbuf; cap(b) > 0 && cap(b) <= keepRecvBuf && len(s.freeBufs) < maxFreeBufs {
		s.freeBufs = append(s.freeBufs, b[:0])
	}
	st.rbuf, st.roff = nil, 0
}

// newBuf returns an empty receive buffer of at least n bytes (n at most
// window), from the free list when one fits.
func (s *Session) newBuf(n int) []byte {
	if k := len(s.freeBufs); k > 0 && cap(s.freeBufs[k-1]) >= n {
		b := s.freeBufs[k-1]
		s.freeBufs[k-1] = nil
		s.freeBufs = s.freeBufs[:k-1]
		return b
	}
	return make([]byte, 0, n)
}

// Probe reports whether the session is still open as far as its
// connection says now. A session is read only while a goroutine waits on
// it, so one whose streams are all idle does not see its peer go away
// (a restart): Probe reads for it, for at most wait. With the read token
// held by another goroutine, that one is reading and would have seen an
// end: Probe returns whether the session is open. Otherwise it takes the
// token and peeks one byte with the connection's read deadline at most
// wait ahead: what arrived stays buffered for the next reader, a timeout
// says open, and an end or error fails the session (false).
func (s *Session) Probe(wait time.Duration) bool {
	select {
	case <-s.token:
	default:
		return s.Err() == nil
	}
	s.mu.Lock()
	open := s.err == nil
	if open && s.br.Buffered() == 0 {
		s.conn.SetReadDeadline(time.Now().Add(wait))
		s.kicked = true // the next reader sets its own deadline
		s.mu.Unlock()
		if _, err := s.br.Peek(1); err != nil && !isTimeout(err) {
			s.fail(s.readErr(err))
			open = false
		}
	} else {
		s.mu.Unlock()
	}
	s.token <- struct{}{}
	return open
}
