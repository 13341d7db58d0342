package ctlforward

import (
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/operator"
)

// Bounds of a forwarded request.
const (
	// MaxRequestBytes bounds a forwarded request: the operator socket's.
	MaxRequestBytes = operator.MaxOperatorRequestBytes
	// MaxResponseBytes bounds a forwarded answer: one mesh frame. A larger
	// answer goes back without its result (ServeStream says so in its
	// reason).
	MaxResponseBytes = mesh.MaxFrameSize
	// RequestReadTimeout bounds the wait for the request on a stream.
	RequestReadTimeout = 10 * time.Second
	// ResponseWriteTimeout bounds the write of the answer.
	ResponseWriteTimeout = 10 * time.Second
	// PlaceWait bounds a forwarded place, as nodeld ctl bounds a place:
	// the controller may try several candidates in turn.
	PlaceWait = 3 * ctl.PlaceTimeout
	// CallWait bounds a forwarded start, stop or unload.
	CallWait = 2 * ctl.CallTimeout
)
