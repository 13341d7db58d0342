package httpfast

import "time"

// Bounds of the server and the upstream client.
const (
	// MaxResponseHeadBytes bounds an instance's response head (status line
	// and headers) on the pooled client and on NewTransport's transport.
	MaxResponseHeadBytes = 64 << 10

	// clientIdleTimeout closes a client keep-alive connection idle this
	// long after a request; before its first request a connection gets
	// the server's head wait only.
	clientIdleTimeout = 120 * time.Second
	// upstreamDialTimeout bounds a TCP connect to a local instance.
	upstreamDialTimeout = 5 * time.Second
	// upstreamIdleTimeout closes an idle upstream keep-alive connection.
	upstreamIdleTimeout = 90 * time.Second
	// freshIdle is how long a connection to a local instance may have
	// been idle and still be reused without first checking that the
	// instance has not closed it, for a request that can be sent again.
	freshIdle = time.Second
	// upstreamMaxIdleConns bounds the idle connections NewTransport keeps
	// in total across all local instances (four times the proxy's
	// largest role concurrency).
	upstreamMaxIdleConns = 4 * 4096
	// transportBufferBytes is the read and write buffer size of
	// NewTransport's connections.
	transportBufferBytes = 32 << 10
	// upstreamReadBufferBytes is the read buffer of a pooled connection:
	// response heads and small stream events; larger reads go straight to
	// the caller's buffer.
	upstreamReadBufferBytes = 4 << 10
	// copyBufferBytes is the size of the pooled buffers a streamed
	// request body is sent through.
	copyBufferBytes = 32 << 10
)
