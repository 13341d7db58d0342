// Package meshproxy carries inference requests over the mesh: both sides
// of the KindInfer exchange (wire format, limits, refusals) in one
// Forwarder, on a pinned TLS 1.3 connection over TCP (tcp.go,
// internal/tlspool; mesh.infer_transport tcp, the default) or a QUIC
// stream of the mesh link (quic, and the fallback when the peer's TCP
// port fails).
//
// Consumer side: ForwardRemote is the proxy's RemoteForwarder. It takes a
// pooled connection (or opens a stream on the existing link; it never
// dials QUIC), sends a versioned head, the body in MeshChunkBytes frames
// and an end frame, and relays the answer: a stream's head at once, any
// other with its first body byte. A failure before the peer answered wraps
// proxy.ErrNotAnswered, a busy peer's refusal proxy.ErrPeerBusy.
//
// Serving side: ServeStream (QUIC) and Run's server (TCP, one exchange
// after another per connection) check the head, the table's
// LocalForPeerHeld, per-peer and total slots, pin "model" and forward to
// the local instance only.
//
// # Invariants
//
// Every size is checked before anything derived from it is allocated; a
// peer's bytes are refused with a stable code and a generic message,
// recorded through Deps.Recorder keyed by peer and code, or end the
// stream; the TCP server admits only a pinned key of a peer with a live
// link, and a lost link closes the peer's connections both ways
// (PeerEvent). A connection is reused only after an exchange both sides
// read to its end. Fuzz targets cover every decoder of peer bytes.
//
// # Concurrency
//
// ForwardRemote runs on the proxy's handler goroutine, ServeStream on the
// mesh's. Run owns the TCP server's goroutines (one per connection, one
// watcher per long exchange that serves the next, the watch list's
// ticker) and waits for them. All methods are safe for concurrent use.
// ForwardRemote tries once.
//
// The long story is docs/architecture.md section 3.
package meshproxy
