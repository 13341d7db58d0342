package ctl

import (
	"time"

	"github.com/nodeld/nodeld/internal/mesh"
)

// Protocol constants of workload.ctl (reference section 2.1). Changing a
// wire value breaks compatibility between nodes.
const (
	// Version is the version of every response, and of a request that
	// carries no controller term (an operator's own call, a caller older
	// than terms, any peer's read).
	Version = 1
	// VersionTerm is the version of a request that carries a controller's
	// raft term (Request.Term, at least 1). A host older than terms reads
	// no such field: it refuses the request as an unsupported version
	// (invalid_request), never acts on it with the term ignored.
	VersionTerm = 2

	// RequestDomain is prefixed, then a NUL byte, to every signed request
	// payload so a signature over a request can never pass as a response,
	// or as any other signed nodeld object.
	RequestDomain = "nodeld.ctl.request.v1"
	// ResponseDomain is the same for responses.
	ResponseDomain = "nodeld.ctl.response.v1"

	// WildcardTarget addresses any node; only describe may use it.
	WildcardTarget = "*"

	// MaxSkew is how far in the future issued_at_ms may lie.
	MaxSkew = 30 * time.Second
	// MaxLifetime bounds expires_at_ms - issued_at_ms.
	MaxLifetime = 300 * time.Second
	// DefaultTTL is the lifetime a Client gives its requests: below
	// MaxLifetime so that a little skew between clocks is tolerated.
	DefaultTTL = 290 * time.Second
	// MaxReadOnlyLifetime bounds the lifetime of a read-only request
	// (describe, status, logs) from a peer that is not a controller: its
	// nonce takes a slot of the peer's quota until it expires, so a short
	// life frees the quota soon. Controllers' requests are bound by
	// MaxLifetime alone.
	MaxReadOnlyLifetime = 60 * time.Second
	// ReadOnlyTTL is the lifetime a Client gives its read-only requests:
	// below MaxReadOnlyLifetime for the same reason as DefaultTTL.
	ReadOnlyTTL = 50 * time.Second

	// CallTimeout is the deadline callers give ordinary calls.
	CallTimeout = 20 * time.Second
	// PlaceTimeout is the deadline for place and load, which include the
	// package fetch.
	PlaceTimeout = 280 * time.Second
	// RescheduleTimeout is the deadline for a reschedule's place.
	RescheduleTimeout = 60 * time.Second
)

// Size and count bounds. Every one is checked before the memory it guards
// is allocated.
const (
	// MaxRequestPayloadBytes bounds a signed request payload.
	MaxRequestPayloadBytes = 256 << 10
	// MaxResponsePayloadBytes bounds a signed response payload.
	MaxResponsePayloadBytes = 4 << 20

	// envelopeOverheadBytes covers the JSON of an envelope around its
	// base64 payload: field names, the hex key and the hex signature.
	envelopeOverheadBytes = 512

	// MaxRequestBytes bounds a request message on the wire (the JSON
	// envelope with its base64 payload). Serve stops reading beyond it.
	MaxRequestBytes = (MaxRequestPayloadBytes+2)/3*4 + envelopeOverheadBytes
	// MaxResponseBytes bounds a response message on the wire.
	MaxResponseBytes = (MaxResponsePayloadBytes+2)/3*4 + envelopeOverheadBytes

	// MaxFrameBytes bounds one frame's payload (the mesh's frame bound).
	MaxFrameBytes = mesh.MaxFrameSize

	// MaxNonces is the capacity of the controllers' nonce guard, and of
	// the pool the peers' guard shares among the peers beyond their
	// reserves (PeerNonceGuard).
	MaxNonces = 8192
	// MaxPeerNonces is how many live nonces one peer that is not a
	// controller may hold: with read-only requests living at most
	// MaxReadOnlyLifetime, about 8 calls a second, sustained.
	MaxPeerNonces = 512
	// PeerNonceReserve is how many live nonces every peer may hold
	// whatever the others hold.
	PeerNonceReserve = 8
	// MaxNoncePeers bounds the peers holding live nonces at once in the
	// peers' guard; with PeerNonceReserve it bounds the nonces held in
	// reserve (8,192).
	MaxNoncePeers = 1024

	// NonceHexLen is the length of a nonce: 16 random bytes in lower hex.
	NonceHexLen = 32
	// DecisionIDHexLen is the length of a decision id: a 32-byte chain
	// hash in lower hex.
	DecisionIDHexLen = 64

	// MaxMethodBytes bounds a method name; longer names are refused
	// without being echoed.
	MaxMethodBytes = 64
	// MaxReasonBytes bounds a refusal reason; longer reasons are cut on a
	// UTF-8 boundary by NewRefusal.
	MaxReasonBytes = 512
)

// Bounds of method parameters (params.go).
const (
	// MaxManifestBytes bounds the manifest.json carried by place.
	MaxManifestBytes = 64 << 10
	// MaxManifestSigBytes bounds the manifest.sig carried by place.
	MaxManifestSigBytes = 16 << 10
	// MaxInstanceConfigBytes bounds the instance config carried by place.
	MaxInstanceConfigBytes = 32 << 10
	// DefaultStopGrace is the grace a stop gives an instance before it is
	// killed, when the request names none.
	DefaultStopGrace = 2 * time.Second
	// MaxStopGrace caps the grace a stop may ask for.
	MaxStopGrace = 60 * time.Second
)

// Bounds of the artifact stream (artifact.go). Piece and control sizes
// are part of the contract between holder and fetcher.
const (
	// MaxPieceBytes bounds the data of one artifact piece (FramePiece
	// carries a PieceHashBytes SHA-256 before it); a holder sends full
	// pieces of this size but the last.
	MaxPieceBytes = 512 << 10
	// PieceHashBytes is the SHA-256 in front of every piece.
	PieceHashBytes = 32
	// MaxArtifactControlBytes bounds the JSON of a fetch, header or
	// refusal frame.
	MaxArtifactControlBytes = 4 << 10
	// MaxArtifactMessageBytes bounds a refusal message, sent or kept.
	MaxArtifactMessageBytes = 256
	// MaxArtifactPathBytes bounds a path in a fetch request (pkg.MaxPathLen).
	MaxArtifactPathBytes = 512
)
