// Package httpfast is the proxy's private HTTP/1.1 stack: a server of the
// common request (Server) and a pooled client of local instances (Pool),
// both cheaper per request than net/http's on the role ports' hot path.
//
// Server serves an http.Handler. It reads the common case itself (GET or
// POST, HTTP/1.1, a head within 4 KiB with one Host, at most one
// Content-Length, no Transfer-Encoding, Expect or Upgrade) and hands a
// connection whose request is anything else, with the bytes read so far,
// to a net/http server through Handoff for the rest of its life: whatever
// net/http refuses or treats specially is refused or treated exactly as
// before (FuzzReadHead checks that every head it serves parses the same in
// net/http). Each exchange's context is a Context: cancelled when the
// client goes away (watched only for exchanges still running 20 ms after
// their body was read), when the server stops, or by the handler with a
// cause (Cause reads it).
//
// # Invariants
//
// Pool sends a Request (head and in-memory body in one write, or a
// streamed body) on a kept-alive connection per role and instance, reads
// the response head within MaxResponseHeadBytes (FuzzResponseHead), and
// takes the connection back with Put only after a whole, clean exchange.
// A reused connection the instance closed is retried once when the body
// can be sent again. NewTransport is net/http's transport of the same
// tuning, for what the Pool does not carry. RawIO's TCP connections (the
// Pool's, the role ports', internal/tlspool's) read and write without
// giving up the goroutine's P: on Linux a busy proxy then no longer hands
// threads off around each call.
//
// # Concurrency
//
// A Server runs one goroutine per connection, serving its
// requests in turn on it; Serve, Shutdown and Handoff are safe to call
// from any goroutine. A Pool is safe for concurrent use; a Conn belongs to
// the one exchange that got it until Put or Close.
//
// It imports the standard library only. The role ports' behaviour built
// on it is docs/internals.md "internal/proxy" and docs/architecture.md
// section 3.
package httpfast
