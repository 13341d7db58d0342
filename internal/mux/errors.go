package mux

import (
	"errors"
	"fmt"
	"net"
	"os"
)

var (
	// ErrSessionClosed is wrapped by every error of a session that ended:
	// closed here, closed or lost by the peer, or failed (the cause is
	// wrapped too: ErrProtocol, the connection's error).
	ErrSessionClosed = errors.New("mux: session closed")
	// ErrTooManyStreams is Open's error when MaxStreams are open.
	ErrTooManyStreams = errors.New("mux: too many streams")
	// ErrReset is wrapped by the error of a stream the peer reset.
	ErrReset = errors.New("mux: stream reset")
	// ErrProtocol is wrapped, with what was wrong, by the error of a
	// session whose peer broke the protocol.
	ErrProtocol = errors.New("mux: protocol error")
)

// resetError is the error of a stream reset by the peer, with the peer's
// code. It is ErrReset for errors.Is.
type resetError struct{ code uint32 }

func (e resetError) Error() string {
	switch e.code {
	case codeCancel:
		return "mux: stream reset by peer (cancel)"
	case codeRefused:
		return "mux: stream reset by peer (refused: too many streams)"
	}
	return fmt.Sprintf("mux: stream reset by peer (code %d)", e.code)
}

func (e resetError) Is(target error) bool { return target == ErrReset }

var (
	// errStreamClosed is a Read's or Write's error once the stream was
	// closed or ended here.
	errStreamClosed = fmt.Errorf("mux: stream closed: %w", net.ErrClosed)
	// errWriteClosed is Write's error after CloseWrite.
	errWriteClosed = errors.New("mux: write after CloseWrite")
	// errNotClient and errNotServer refuse Open on a server and Accept on
	// a client.
	errNotClient = errors.New("mux: Open on a server session")
	errNotServer = errors.New("mux: Accept on a client session")
	// errIDsExhausted: a client session used every stream id.
	errIDsExhausted = errors.New("mux: stream ids exhausted")
)

// isTimeout reports whether err is a deadline's: the connection stays
// usable (crypto/tls keeps a connection after a read timeout), so the
// session must not fail on it.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
