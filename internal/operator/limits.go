package operator

import (
	"os"
	"time"
)

// Operator socket bounds.
const (
	// MaxOperatorRequestBytes bounds one operator request line.
	MaxOperatorRequestBytes = 64 << 10
	// MaxOperatorResponseBytes bounds one operator response line: a ctl
	// result at its bound, escaped, plus the envelope.
	MaxOperatorResponseBytes = 2*(4<<20) + 64<<10
	// MaxOperatorConns bounds the operator connections served at once;
	// one over the bound is answered with an error and closed.
	MaxOperatorConns = 16
	// OperatorReadTimeout bounds the wait for a request on a connection.
	OperatorReadTimeout = 10 * time.Second
	// OperatorWriteTimeout bounds the write of a response.
	OperatorWriteTimeout = 10 * time.Second
	// StaleProbeTimeout bounds the dial that decides whether an existing
	// socket file still has a daemon behind it.
	StaleProbeTimeout = time.Second
	// SocketMode is the operator socket's mode without a group;
	// SocketGroupMode with one.
	SocketMode      os.FileMode = 0o600
	SocketGroupMode os.FileMode = 0o660
	// SocketDirMode is the mode of a socket directory created by Run.
	SocketDirMode os.FileMode = 0o700
)
