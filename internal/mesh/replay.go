package mesh

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"go.uber.org/zap"
)

// A peer killed and started again on the same key and address comes back
// before its peers notice: they still hold their links to its previous run,
// and the first stream one of them opens there is answered with a
// stateless reset (the node's reset key is derived from its node key, so
// its new run resets the old run's connections at once). Such a stream is
// sent again, once, on the link to the peer's new run, when nothing
// written on it can have been read by any run of the peer:
//
//   - the link ended with a stateless reset, or was closed with CodeStale
//     because a link to the peer's new run replaced it: either way it
//     leads to a run that is gone (after CodeStale, only a stream that
//     wrote nothing yet is sent again: the old run may have read what
//     it was sent before it died);
//   - nothing was read on the stream yet;
//   - everything written fits in replayCap and no write failed;
//   - since the first write the link received no packet at all from the
//     peer, and sent no more packets than the bytes written need at the
//     least (one per maxPacketPayload). A stateless reset is the answer
//     to a packet its sender has no state for: with no later packet sent,
//     the packet that drew it carried (part of) the request or preceded
//     it, so the request reached the new run, which does not know the
//     stream, or went out after the new run had already replaced the old
//     one. A request the old run read before it died is followed by a
//     retransmission or an acknowledgement before any reset comes, and is
//     never sent again: a ctl mutation the peer may have acted on is
//     reported as indeterminate, never repeated.
//
// The replay waits for the new link (the restarted peer dials its peers
// when it starts, and a reset makes this side redial at once) up to the
// stream's deadline, and at most RestartLinkWait.

// replayCap bounds what an opened stream keeps of its writes to send again;
// a stream that wrote more is never replayed. Requests (a ctl frame, an
// inference head and a small body) fit; a streamed body does not, and its
// buffer is dropped at once.
const replayCap = 64 << 10

// maxPacketPayload is more stream data than one QUIC packet carries (the
// largest packet quic-go sends is 1452 bytes), so that bytes/maxPacketPayload
// never overestimates the packets a write needs.
const maxPacketPayload = 1452

// replay is the state an opened stream keeps to be sent again on a new
// link (see above).
type replay struct {
	ls     *links
	nodeID string

	// wmu is held across each Write and CloseWrite and while a replay
	// rewrites the stream, so that writes land on one stream in order.
	wmu sync.Mutex
	// read is set once a byte was read: from then on never replay.
	read atomic.Bool

	mu      sync.Mutex // guards every field below
	l       *link
	started bool   // the first write happened
	sent0   uint64 // l's packets sent and received before the first write
	recv0   uint64
	buf     []byte // every byte written, kind byte first
	off     bool   // never replay: over replayCap, failed, aborted or done
	closed  bool   // CloseWrite was called
	aborted bool   // Reset, Close, StopReading or AbortWrite was called
	rd, wd  time.Time
	cancel  context.CancelFunc // ends a replay's wait; nil when none runs
	busy    chan struct{}      // non-nil while a replay runs, closed when it ends
}

// start notes the first write, before anything is sent.
func (r *replay) start(n int) {
	st := r.l.conn.ConnectionStats()
	r.mu.Lock()
	r.started, r.sent0, r.recv0 = true, st.PacketsSent, st.PacketsReceived
	if n+1 > replayCap {
		r.off = true
	}
	r.mu.Unlock()
}

// keepFirst keeps the first bytes written (kind byte first): b is not
// modified after.
func (r *replay) keepFirst(b []byte) {
	r.mu.Lock()
	if !r.off {
		r.buf = b
	}
	r.mu.Unlock()
}

// keep appends written bytes to the replay buffer.
func (r *replay) keep(b []byte) {
	if len(b) == 0 {
		return
	}
	r.mu.Lock()
	switch {
	case r.off:
	case len(r.buf)+len(b) > replayCap:
		r.off, r.buf = true, nil
	default:
		r.buf = append(r.buf, b...)
	}
	r.mu.Unlock()
}

func (r *replay) closeWrite() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

// answered notes that the peer sent something: the stream is its now.
func (r *replay) answered() {
	if r.read.Load() {
		return
	}
	r.read.Store(true)
	r.mu.Lock()
	r.off, r.buf = true, nil
	r.mu.Unlock()
}

func (r *replay) abort() {
	r.mu.Lock()
	r.aborted, r.off, r.buf = true, true, nil
	if r.cancel != nil {
		r.cancel()
	}
	r.mu.Unlock()
}

func (r *replay) setDeadlines(rd, wd time.Time, setR, setW bool) {
	r.mu.Lock()
	if setR {
		r.rd = rd
	}
	if setW {
		r.wd = wd
	}
	r.mu.Unlock()
}

// unseenLocked reports whether nothing written on the stream can have been
// read by the peer (see above), given that its link ended as stale; reset
// tells whether it ended with a stateless reset, which the packet counts
// below are evidence against. A link closed as stale by this side proves
// nothing about what its peer read before it died: only a stream that
// wrote nothing is sent again then.
func (r *replay) unseenLocked(reset bool) bool {
	if r.off || r.aborted || r.read.Load() {
		return false
	}
	if !r.started {
		return true
	}
	if !reset {
		return false
	}
	st := r.l.conn.ConnectionStats()
	need := max(uint64((len(r.buf)+maxPacketPayload-1)/maxPacketPayload), 1)
	return st.PacketsReceived == r.recv0 && st.PacketsSent-r.sent0 <= need
}

// recover is called with the error of a Read or Write on qs. It reports
// whether the stream now runs on another quic stream, on which the
// operation is to be tried again: it was replayed (by this call or a
// concurrent one).
func (s *Stream) recover(qs *quic.Stream, err error) bool {
	r := s.rp
	if !staleLink(err) {
		r.mu.Lock()
		r.off, r.buf = true, nil
		r.mu.Unlock()
		return false
	}
	r.mu.Lock()
	if s.q() != qs {
		r.mu.Unlock()
		return true
	}
	if busy := r.busy; busy != nil {
		r.mu.Unlock()
		<-busy
		return s.q() != qs
	}
	if !r.unseenLocked(restarted(err)) {
		r.off, r.buf = true, nil
		r.mu.Unlock()
		return false
	}
	r.off = true // once
	busy := make(chan struct{})
	r.busy = busy
	deadline := r.rd
	if deadline.IsZero() || (!r.wd.IsZero() && r.wd.Before(deadline)) {
		deadline = r.wd
	}
	if limit := time.Now().Add(RestartLinkWait); deadline.IsZero() || limit.Before(deadline) {
		deadline = limit
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	r.cancel = cancel
	old := r.l
	r.mu.Unlock()
	defer func() {
		cancel()
		r.mu.Lock()
		r.cancel, r.busy = nil, nil
		r.mu.Unlock()
		close(busy)
	}()

	kind := StreamKind(s.kind)
	nl, nqs, err := r.ls.reopen(ctx, r.nodeID, old)
	if err != nil {
		r.ls.log.Debug("stream not replayed on a new link", zap.String("peer", r.nodeID), zap.Error(err))
		return false
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.mu.Lock()
	if r.aborted {
		r.mu.Unlock()
		nqs.CancelRead(quic.StreamErrorCode(StreamCodeCancelled))
		nqs.CancelWrite(quic.StreamErrorCode(StreamCodeCancelled))
		return false
	}
	_ = nqs.SetReadDeadline(r.rd)
	_ = nqs.SetWriteDeadline(r.wd)
	buf, closed := r.buf, r.closed
	r.l, r.buf = nl, nil
	s.qs.Store(nqs)
	r.mu.Unlock()
	r.ls.met.stream(kind, resultReplayed)
	if len(buf) > 0 {
		if _, err := nqs.Write(buf); err != nil {
			return true // the operation fails again on the new stream
		}
	}
	if closed {
		_ = nqs.Close()
	}
	return true
}

// PeerRestarted reports whether err (from a stream's Read or Write, or
// OpenStream) says the link led to a run of the peer that is gone: the
// peer restarted. A caller that knows its request may be sent twice (an
// inference request before any answer) can send it again to the same
// peer, whose new run is linking; the mesh itself sends a stream again
// only when no run can have read it.
func PeerRestarted(err error) bool { return staleLink(err) }

// restarted reports whether a link ended with a stateless reset: the
// peer's address answered without knowing the connection, as a peer does
// after a restart.
func restarted(err error) bool {
	var reset *quic.StatelessResetError
	return errors.As(err, &reset)
}

// stopping reports whether a link ended because the peer closed it as it
// stopped (CodeShutdown): a node's graceful stop, often the first half of
// a restart.
func stopping(err error) bool {
	var app *quic.ApplicationError
	return errors.As(err, &app) && app.Remote && app.ErrorCode == CodeShutdown
}

// staleLink reports whether err says the stream's link led to a run of the
// peer that is gone: a stateless reset, or this side closed it with
// CodeStale when a link to the peer's new run replaced it.
func staleLink(err error) bool {
	if restarted(err) {
		return true
	}
	var app *quic.ApplicationError
	return errors.As(err, &app) && !app.Remote && app.ErrorCode == CodeStale
}
