package demand

import "time"

// Wire constants of the demand call. Changing one breaks compatibility
// between nodes.
const (
	// Version is the only request and response version accepted.
	Version = 1
	// RequestDomain is signed before a request payload (then a NUL byte),
	// so a demand signature never passes for a workload.ctl message.
	RequestDomain = "nodeld.demand.request.v1"
	// ResponseDomain is the same for answers.
	ResponseDomain = "nodeld.demand.response.v1"
)

// Bounds and rates. Every size is checked before what it guards is
// allocated.
const (
	// MaxPayloadBytes bounds a signed request or response payload.
	MaxPayloadBytes = 2 << 10
	// MaxRequestBytes bounds a request frame (the envelope with its base64
	// payload).
	MaxRequestBytes = (MaxPayloadBytes+2)/3*4 + 512
	// MaxResponseBytes bounds an answer frame.
	MaxResponseBytes = MaxRequestBytes

	// MaxLifetime bounds a request's expires_at - issued_at.
	MaxLifetime = 60 * time.Second
	// RequestTTL is the lifetime a Client gives its requests.
	RequestTTL = 30 * time.Second
	// StreamTimeout bounds a demand stream, both sides.
	StreamTimeout = 10 * time.Second

	// DemandRate is how many calls a second one peer's token bucket
	// refills; DemandBurst is its size.
	DemandRate  = 5
	DemandBurst = 10
	// MaxBuckets bounds the peers with a token bucket held; full
	// (refilled) ones are dropped to make room.
	MaxBuckets = 1024

	// DemandInterval is the least time between two calls a Holds sends
	// for one role.
	DemandInterval = time.Second
	// MaxHoldWait caps the wait Expect grants whatever a standby says.
	MaxHoldWait = 10 * time.Minute
	// MaxHoldRoles bounds the roles a Holds keeps call state for.
	MaxHoldRoles = 1024
)
