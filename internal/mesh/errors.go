package mesh

import (
	"errors"

	"github.com/quic-go/quic-go"
)

var (
	// ErrNoLink is returned by OpenStream when there is no live link to
	// the node.
	ErrNoLink = errors.New("no mesh link to the node")
	// ErrListenChanged is returned by ApplyConfig for a new listen
	// address: the socket is bound once, a restart applies it.
	ErrListenChanged = errors.New("mesh listen address cannot change without a restart")
	// ErrRefused is wrapped by handshake errors for a key that is not
	// admitted.
	ErrRefused = errors.New("peer key not admitted")
)

// StreamCode is the code a stream is aborted with (Stream.Reset,
// StopReading, AbortWrite), as the peer sees it (ResetCode). Codes are
// numbers on the wire, stable across versions.
type StreamCode uint64

// Stream error codes, sent when the mesh resets a stream. Stable on the
// wire: never reuse a value.
const (
	// StreamCodeMalformed: a frame or its payload could not be decoded.
	StreamCodeMalformed StreamCode = 0x101
	// StreamCodeTooLarge: a declared size exceeded its bound.
	StreamCodeTooLarge StreamCode = 0x102
	// StreamCodeUnknownKind: the kind byte names no stream kind.
	StreamCodeUnknownKind StreamCode = 0x103
	// StreamCodeNoHandler: the kind is known but this node serves no
	// handler for it.
	StreamCodeNoHandler StreamCode = 0x104
	// StreamCodeTimeout: the peer did not send in time.
	StreamCodeTimeout StreamCode = 0x105
	// StreamCodeCancelled: the local side gave up (shutdown, context).
	StreamCodeCancelled StreamCode = 0x106
)

// Connection (application) error codes, sent when the mesh closes a link.
const (
	// CodeShutdown: the node is stopping.
	CodeShutdown quic.ApplicationErrorCode = 0x0
	// CodeDuplicate: another link to the same peer was kept.
	CodeDuplicate quic.ApplicationErrorCode = 0x1
	// CodeRemoved: the peer was removed from the configuration.
	CodeRemoved quic.ApplicationErrorCode = 0x2
	// CodeNotAdmitted: the peer's key is not (or no longer) admitted.
	CodeNotAdmitted quic.ApplicationErrorCode = 0x3
	// CodeDead: no liveness heartbeat was heard within the timeout.
	CodeDead quic.ApplicationErrorCode = 0x4
	// CodeStale: the peer restarted; a link to its new run replaced this
	// one, which leads to the run that is gone.
	CodeStale quic.ApplicationErrorCode = 0x5
)
