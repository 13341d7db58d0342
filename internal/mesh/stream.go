package mesh

import (
	"context"
	"errors"
	"io"
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
	qs *quic.Stream
	// kind is the stream's kind byte while it is still to be sent: an
	// opened stream sends it with its first Write (or CloseWrite, Close),
	// so that a request and its kind leave in one packet. Only the writing
	// goroutine touches it.
	kind    byte
	pending bool
}

func newStream(qs *quic.Stream) *Stream { return &Stream{qs: qs} }

// newOpenedStream is a stream this side opened, whose kind byte goes out
// with the first bytes written.
func newOpenedStream(qs *quic.Stream, kind StreamKind) *Stream {
	return &Stream{qs: qs, kind: byte(kind), pending: true}
}

// coalesceKindBytes is the largest write the kind byte is copied in front
// of; a larger first write sends the kind byte on its own just before it
// (quic-go packs both into the same packets anyway).
const coalesceKindBytes = 16 << 10

// Read reads what the peer sent. It returns io.EOF after the peer's
// CloseWrite; after a reset by either side it returns an error that
// ResetCode recognises when the peer reset.
func (s *Stream) Read(p []byte) (int, error) { return s.qs.Read(p) }

// Write writes to the peer. On a stream returned by OpenStream the first
// Write also carries the stream's kind byte.
func (s *Stream) Write(p []byte) (int, error) {
	if !s.pending || len(p) == 0 {
		return s.qs.Write(p)
	}
	s.pending = false
	if len(p) > coalesceKindBytes {
		if _, err := s.qs.Write([]byte{s.kind}); err != nil {
			return 0, err
		}
		return s.qs.Write(p)
	}
	buf := make([]byte, 1+len(p))
	buf[0] = s.kind
	copy(buf[1:], p)
	n, err := s.qs.Write(buf)
	return max(n-1, 0), err
}

// flushKind sends a kind byte not sent yet, before the write side ends.
func (s *Stream) flushKind() error {
	if !s.pending {
		return nil
	}
	s.pending = false
	_, err := s.qs.Write([]byte{s.kind})
	return err
}

// SetDeadline sets the read and write deadlines; a zero time clears them.
// A Read or Write past its deadline fails with a net.Error whose Timeout
// is true.
func (s *Stream) SetDeadline(t time.Time) error { return s.qs.SetDeadline(t) }

// SetReadDeadline sets the read deadline; a zero time clears it.
func (s *Stream) SetReadDeadline(t time.Time) error { return s.qs.SetReadDeadline(t) }

// SetWriteDeadline sets the write deadline; a zero time clears it.
func (s *Stream) SetWriteDeadline(t time.Time) error { return s.qs.SetWriteDeadline(t) }

// Context ends as soon as the write side is over: after CloseWrite, Close,
// AbortWrite or Reset, or when the peer stops reading (its Close,
// StopReading or Reset), which is how a serving side learns that its
// consumer went away.
func (s *Stream) Context() context.Context { return s.qs.Context() }

// CloseWrite ends the write side cleanly (FIN): the peer reads io.EOF
// after every byte written. The read side stays open.
func (s *Stream) CloseWrite() error {
	if err := s.flushKind(); err != nil {
		return err
	}
	return s.qs.Close()
}

// Close is done with the stream: it stops reading with StreamCodeCancelled,
// which makes a pending Read return, and ends the write side cleanly, so
// that bytes already written still reach the peer.
func (s *Stream) Close() error {
	s.qs.CancelRead(quic.StreamErrorCode(StreamCodeCancelled))
	if err := s.flushKind(); err != nil {
		return err
	}
	return s.qs.Close()
}

// Reset aborts both directions with code: the peer's Read and Write fail
// with it.
func (s *Stream) Reset(code StreamCode) {
	s.qs.CancelRead(quic.StreamErrorCode(code))
	s.qs.CancelWrite(quic.StreamErrorCode(code))
}

// FinishReading ends the read side once nothing more is expected from the
// peer: it waits up to wait for the peer's clean end (CloseWrite) with no
// data before it, which usually arrived with the peer's last bytes, and
// reports whether it came; if it did not, it stops reading with
// StreamCodeCancelled (as StopReading). Either way the read side is done.
// Taking the clean end rather than stopping spares a STOP_SENDING frame,
// and the packet that carries it, per exchange.
func (s *Stream) FinishReading(wait time.Duration) bool {
	_ = s.qs.SetReadDeadline(time.Now().Add(wait))
	var one [1]byte
	if n, err := s.qs.Read(one[:]); n == 0 && err == io.EOF {
		return true
	}
	s.qs.CancelRead(quic.StreamErrorCode(StreamCodeCancelled))
	return false
}

// StopReading aborts the read side with code: the peer's Write fails with
// it, and this side's Read returns at once. The write side is untouched.
func (s *Stream) StopReading(code StreamCode) { s.qs.CancelRead(quic.StreamErrorCode(code)) }

// AbortWrite aborts the write side with code: unsent bytes may be lost
// and the peer's Read fails with it. The read side is untouched.
func (s *Stream) AbortWrite(code StreamCode) { s.qs.CancelWrite(quic.StreamErrorCode(code)) }

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
