package mesh

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

// Stream is one bidirectional mesh stream, as handed to a Handler or
// returned by OpenStream. It keeps the QUIC stream inside the mesh: its
// callers end it with the methods below and stream codes, never with
// quic-go's types.
//
// The ways to end a stream:
//
//   - CloseWrite: a clean end of what this side sends (FIN); reading goes
//     on, to the peer's end.
//   - Close: done with the stream. Stops reading with StreamCodeCancelled,
//     so a Read blocked in another goroutine returns, and ends the write
//     side cleanly: bytes already written are still delivered.
//   - Reset: abort both directions with a code; unsent bytes may be lost.
//   - StopReading, AbortWrite: abort one direction with a code.
//
// The first end of a direction wins. Read and Write may each be used by
// one goroutine at a time; CloseWrite and Close must not run concurrently
// with Write. Reset, StopReading and AbortWrite may be called from any
// goroutine, at any time and more than once: they are how another
// goroutine unblocks a Read or Write. After AbortWrite or Reset,
// CloseWrite and Close send nothing and return an error.
type Stream struct {
	qs atomic.Pointer[quic.Stream]
	// kind is the stream's kind byte while it is still to be sent: an
	// opened stream sends it with its first Write (or CloseWrite, Close),
	// so that a request and its kind leave in one packet. Only the writing
	// goroutine touches it.
	kind    byte
	pending bool
	// rp, on a stream this side opened, can send the stream again on a
	// new link to the same peer (see replay); nil on accepted streams.
	rp *replay
	// cr, on an accepted stream, holds the credit of the link's streams
	// already served, released with this stream's writes (see credits).
	cr *credits
}

func newStream(qs *quic.Stream) *Stream {
	s := &Stream{}
	s.qs.Store(qs)
	return s
}

// newOpenedStream is a stream this side opened on l to nodeID, whose kind
// byte goes out with the first bytes written.
//
// An inference stream is never sent again: it is a forward, whose one
// retry belongs to the proxy's routing loop (which asks the table again,
// and knows whether anything was relayed to its client); the mesh
// replaying it too would make two owners and up to two more attempts.
func newOpenedStream(ls *links, nodeID string, l *link, qs *quic.Stream, kind StreamKind) *Stream {
	s := &Stream{kind: byte(kind), pending: true, rp: &replay{ls: ls, nodeID: nodeID, l: l, off: kind == KindInfer}}
	s.qs.Store(qs)
	return s
}

func (s *Stream) q() *quic.Stream { return s.qs.Load() }

// coalesceKindBytes is the largest write the kind byte is copied in front
// of; a larger first write sends the kind byte on its own just before it
// (quic-go packs both into the same packets anyway).
const coalesceKindBytes = 16 << 10

// Read reads what the peer sent. It returns io.EOF after the peer's
// CloseWrite; after a reset by either side it returns an error that
// ResetCode recognises when the peer reset. On an opened stream whose link
// turned out to lead to a previous run of the peer, Read first sends the
// stream again on the link to its new run when that is safe (see replay).
func (s *Stream) Read(p []byte) (int, error) {
	qs := s.q()
	n, err := qs.Read(p)
	if s.rp == nil {
		return n, err
	}
	if n > 0 {
		s.rp.answered()
	}
	if err != nil && n == 0 && s.recover(qs, err) {
		return s.Read(p)
	}
	return n, err
}

// Write writes to the peer. On a stream returned by OpenStream the first
// Write also carries the stream's kind byte.
func (s *Stream) Write(p []byte) (int, error) {
	rp := s.rp
	if rp == nil {
		if s.cr != nil {
			s.cr.beforeWrite()
		}
		return s.q().Write(p)
	}
	rp.wmu.Lock()
	qs := s.q()
	n, err := s.write(qs, p)
	rp.wmu.Unlock()
	if err != nil && s.recover(qs, err) {
		m, err := s.Write(p[n:])
		return n + m, err
	}
	return n, err
}

// write writes p on qs, with the kind byte first when it is still to be
// sent, and keeps what was written for a replay. rp.wmu is held.
func (s *Stream) write(qs *quic.Stream, p []byte) (int, error) {
	rp := s.rp
	if !s.pending || len(p) == 0 {
		n, err := qs.Write(p)
		rp.keep(p[:n])
		return n, err
	}
	s.pending = false
	rp.start(len(p))
	if len(p) > coalesceKindBytes {
		if _, err := qs.Write([]byte{s.kind}); err != nil {
			return 0, err
		}
		rp.keepFirst([]byte{s.kind})
		n, err := qs.Write(p)
		rp.keep(p[:n])
		return n, err
	}
	buf := make([]byte, 1+len(p))
	buf[0] = s.kind
	copy(buf[1:], p)
	n, err := qs.Write(buf)
	rp.keepFirst(buf[:n])
	return max(n-1, 0), err
}

// flushKind sends a kind byte not sent yet, before the write side ends.
func (s *Stream) flushKind(qs *quic.Stream) error {
	if !s.pending {
		return nil
	}
	s.pending = false
	if s.rp != nil {
		s.rp.start(0)
	}
	n, err := qs.Write([]byte{s.kind})
	if s.rp != nil {
		s.rp.keepFirst([]byte{s.kind}[:n])
	}
	return err
}

// SetDeadline sets the read and write deadlines; a zero time clears them.
// A Read or Write past its deadline fails with a net.Error whose Timeout
// is true.
func (s *Stream) SetDeadline(t time.Time) error {
	if s.rp != nil {
		s.rp.setDeadlines(t, t, true, true)
	}
	return s.q().SetDeadline(t)
}

// SetReadDeadline sets the read deadline; a zero time clears it.
func (s *Stream) SetReadDeadline(t time.Time) error {
	if s.rp != nil {
		s.rp.setDeadlines(t, time.Time{}, true, false)
	}
	return s.q().SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline; a zero time clears it.
func (s *Stream) SetWriteDeadline(t time.Time) error {
	if s.rp != nil {
		s.rp.setDeadlines(time.Time{}, t, false, true)
	}
	return s.q().SetWriteDeadline(t)
}

// Context ends as soon as the write side is over: after CloseWrite, Close,
// AbortWrite or Reset, or when the peer stops reading (its Close,
// StopReading or Reset), which is how a serving side learns that its
// consumer went away.
func (s *Stream) Context() context.Context { return s.q().Context() }

// CloseWrite ends the write side cleanly (FIN): the peer reads io.EOF
// after every byte written. The read side stays open.
func (s *Stream) CloseWrite() error {
	if s.rp == nil {
		return s.q().Close()
	}
	s.rp.wmu.Lock()
	defer s.rp.wmu.Unlock()
	qs := s.q()
	if err := s.flushKind(qs); err != nil {
		return err
	}
	s.rp.closeWrite()
	return qs.Close()
}

// Close is done with the stream: it stops reading with StreamCodeCancelled,
// which makes a pending Read return, and ends the write side cleanly, so
// that bytes already written still reach the peer.
func (s *Stream) Close() error {
	if s.rp != nil {
		s.rp.abort()
	}
	qs := s.q()
	qs.CancelRead(quic.StreamErrorCode(StreamCodeCancelled))
	if err := s.flushKind(qs); err != nil {
		return err
	}
	return qs.Close()
}

// Reset aborts both directions with code: the peer's Read and Write fail
// with it.
func (s *Stream) Reset(code StreamCode) {
	if s.rp != nil {
		s.rp.abort()
	}
	qs := s.q()
	qs.CancelRead(quic.StreamErrorCode(code))
	qs.CancelWrite(quic.StreamErrorCode(code))
}

// FinishReading ends the read side once nothing more is expected from the
// peer: it waits up to wait for the peer's clean end (CloseWrite) with no
// data before it, which usually arrived with the peer's last bytes, and
// reports whether it came; if it did not, it stops reading with
// StreamCodeCancelled (as StopReading). Either way the read side is done.
// Taking the clean end rather than stopping spares a STOP_SENDING frame,
// and the packet that carries it, per exchange.
func (s *Stream) FinishReading(wait time.Duration) bool {
	if s.rp != nil {
		s.rp.abort()
	}
	qs := s.q()
	_ = qs.SetReadDeadline(time.Now().Add(wait))
	var one [1]byte
	if n, err := qs.Read(one[:]); n == 0 && err == io.EOF {
		return true
	}
	qs.CancelRead(quic.StreamErrorCode(StreamCodeCancelled))
	return false
}

// StopReading aborts the read side with code: the peer's Write fails with
// it, and this side's Read returns at once. The write side is untouched.
func (s *Stream) StopReading(code StreamCode) {
	if s.rp != nil {
		s.rp.abort()
	}
	s.q().CancelRead(quic.StreamErrorCode(code))
}

// AbortWrite aborts the write side with code: unsent bytes may be lost
// and the peer's Read fails with it. The read side is untouched.
func (s *Stream) AbortWrite(code StreamCode) {
	if s.rp != nil {
		s.rp.abort()
	}
	s.q().CancelWrite(quic.StreamErrorCode(code))
}

// ResetCode reports the code with which the peer aborted a stream, when
// err (from Read or Write, possibly wrapped) says the peer did: its Reset,
// AbortWrite (seen by Read) or StopReading (seen by Write). An abort by
// this side, a timeout or any other error reports false.
func ResetCode(err error) (StreamCode, bool) {
	var se *quic.StreamError
	if errors.As(err, &se) && se.Remote {
		return StreamCode(se.ErrorCode), true
	}
	return 0, false
}

// LinkFailed reports whether err says the link itself failed rather than
// one stream: there was no link (ErrNoLink), or the connection ended (closed
// by either side, a liveness or idle timeout, a stateless reset, a
// transport error). A stream that failed this way was never answered by a
// peer that chose to: the request may be tried on another node when
// nothing of its response was relayed yet. A stream reset by the peer
// (ResetCode) is not a link failure.
func LinkFailed(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNoLink) {
		return true
	}
	var (
		app   *quic.ApplicationError
		idle  *quic.IdleTimeoutError
		reset *quic.StatelessResetError
		tr    *quic.TransportError
		hs    *quic.HandshakeTimeoutError
	)
	return errors.As(err, &app) || errors.As(err, &idle) || errors.As(err, &reset) ||
		errors.As(err, &tr) || errors.As(err, &hs)
}

// Request sends the one request of a request and answer exchange on s:
// s takes ctx's deadline and is reset once ctx ends (until the caller
// calls stop, which it defers), then one frame of type t with payload is
// written and the write side closed. On a write error s is reset: the
// peer read nothing before the whole frame was there.
func (s *Stream) Request(ctx context.Context, t FrameType, payload []byte) (stop func() bool, err error) {
	stop = context.AfterFunc(ctx, func() { s.Reset(StreamCodeCancelled) })
	deadline, _ := ctx.Deadline()
	_ = s.SetDeadline(deadline)
	if err := WriteFrame(s, t, payload); err != nil {
		s.Reset(StreamCodeCancelled)
		return stop, err
	}
	_ = s.CloseWrite()
	return stop, nil
}
