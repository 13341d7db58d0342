package proxy

import "time"

// Size, count and time bounds enforced by the proxy. Config fields that are
// zero take the Default values; the Max values cap what a config may ask for.
const (
	// DefaultConcurrency is a role's in-flight request cap when its config
	// says 0.
	DefaultConcurrency = 64
	// MaxConcurrency caps a role's configured concurrency.
	MaxConcurrency = 4096
	// DefaultMaxBodyBytes bounds a request body from a local client.
	DefaultMaxBodyBytes int64 = 8 << 20
	// DefaultMeshMaxBodyBytes bounds a request body forwarded over the mesh.
	DefaultMeshMaxBodyBytes int64 = 2 << 20
	// DefaultMaxResponseBytes caps a response body relayed to a client.
	DefaultMaxResponseBytes int64 = 64 << 20
	// MaxBodyBytesLimit caps both configurable body limits.
	MaxBodyBytesLimit int64 = 256 << 20
	// DefaultStallTimeout is the longest upstream silence (waiting for the
	// response head or between body bytes) before the exchange is cut.
	DefaultStallTimeout = 120 * time.Second
	// DefaultRequestTimeout caps the wall-clock time of one forwarded request.
	DefaultRequestTimeout = 900 * time.Second
	// DefaultHeaderTimeout bounds reading a client's request head, and a
	// new connection's wait for its first request.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultMaxConnections is how many client connections one role's
	// listener holds open at once; one more is closed as soon as it is
	// accepted.
	DefaultMaxConnections = 512
	// MaxConnectionsLimit caps a configured MaxConnections.
	MaxConnectionsLimit = 1 << 16
	// DefaultBodyTimeout bounds reading a client's request body, counted
	// from the end of its head (the reference's body_timeout).
	DefaultBodyTimeout = 30 * time.Second
	// DefaultDrainTimeout bounds a graceful shutdown: in-flight requests
	// still running after it are cut.
	DefaultDrainTimeout = 10 * time.Second
	// MaxHeaderBytes bounds a client's request head (request line and
	// headers), enforced by net/http.
	MaxHeaderBytes = 16 << 10
	// MaxUpstreamHeaderBytes bounds the response head of a local instance
	// (status line and headers), on the transport of the loopback proxy and
	// on the one a serving node uses for peers' requests, like the
	// runtime probes' bound. A longer head fails the exchange: 502 on a
	// role port, an upstream_error refusal to a peer.
	MaxUpstreamHeaderBytes = 64 << 10
	// MeshBufferedBodyBytes is the largest request body a mesh forward
	// holds whole, on both sides: the consumer reads it before it sends it
	// (so that a forward whose link fails before the peer answered can be
	// sent to the next peer), the serving node before it pins its model.
	// A larger body, or one of unknown length that turns out larger, is
	// streamed as it arrives (and is not retried), so that what a forward
	// holds stays a chunk whatever inference.limits.mesh_max_body_bytes
	// allows.
	MeshBufferedBodyBytes = 64 << 10
	// MaxPathBytes bounds the request target (path and query).
	MaxPathBytes = 2048
	// MaxRoles bounds the number of roles (and so listeners) in a config.
	MaxRoles = 256

	// clientIdleTimeout closes a client keep-alive connection idle this
	// long after a request; before its first request a connection gets
	// the HeaderTimeout only.
	clientIdleTimeout = 120 * time.Second
	// connRefusedLogEvery spaces the log lines of a role refusing
	// connections over its cap (the metric counts every refusal).
	connRefusedLogEvery = time.Minute
	// upstreamDialTimeout bounds a TCP connect to a local instance.
	upstreamDialTimeout = 5 * time.Second
	// upstreamIdleTimeout closes an idle upstream keep-alive connection.
	upstreamIdleTimeout = 90 * time.Second
	// freshIdle is how long a connection to a local instance may have
	// been idle and still be reused without first checking that the
	// instance has not closed it, for a request that can be sent again.
	freshIdle = time.Second
	// upstreamMaxIdleConns bounds the idle upstream connections kept in
	// total across all local instances.
	upstreamMaxIdleConns = 4 * MaxConcurrency
	// copyBufferBytes is the size of the pooled buffers used to relay
	// response bodies.
	copyBufferBytes = 32 << 10
	// streamBufferBytes is the size of the pooled buffers used to relay
	// streamed responses (SSE, chunked) on the local path: held for the
	// whole stream, read a few events at a time.
	streamBufferBytes = 4 << 10
	// transportBufferBytes is the read and write buffer size of the
	// connections of the mesh's serving transport.
	transportBufferBytes = 32 << 10
	// upstreamReadBufferBytes is the read buffer of a connection to a
	// local instance on the role ports' path: response heads and small
	// stream events; larger reads go straight to the relay's buffer.
	upstreamReadBufferBytes = 4 << 10
)
