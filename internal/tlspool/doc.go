// Package tlspool is a pool of mutually authenticated TLS 1.3
// connections over TCP between node identities: the transport of
// inference streams between peers (internal/meshproxy), QUIC kept for
// control. A Pool dials a peer at an address, pinning its Ed25519 key,
// and keeps idle connections for reuse; a Server accepts connections whose
// client key its Admit function admits and hands each to a handler. A
// dialed connection is returned only once the server confirmed its
// admission.
//
// # Invariants
//
//   - TLS 1.3 only; both ends present a certificate. A server's key must
//     equal the one the caller pinned; a client's key must pass Admit (no
//     Admit, no server: default deny). Chains are not checked against
//     roots: the key is the identity, as on the mesh. With ALPN set, both
//     ends must select it.
//   - Connections per peer key are bounded (MaxConnsPerPeer, in use and
//     idle), and so, optionally, are dials in progress (MaxDialsPerPeer);
//     over either Get fails at once (ErrPoolFull, ErrDialing), never waits.
//   - An idle connection older than IdleTimeout, or closed by its peer
//     (a non-blocking peek on Get), is closed, never reused. ClosePeer
//     aborts a peer's connections in use and idle, on either side.
//   - A handshake (with the admission byte) is bounded by HandshakeTimeout
//     and the caller's context.
//
// # Concurrency
//
// A Pool is safe for concurrent use and starts no goroutine: dialing runs
// on Get's caller, expiry is checked on Get and Put. A Conn is used by one
// goroutine at a time; Abort may come from any. Server.Run owns one
// goroutine per connection (handshake, then the handler) and waits for
// all before it returns.
package tlspool
