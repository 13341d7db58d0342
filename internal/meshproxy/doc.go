// Package meshproxy carries inference requests over the mesh: both sides
// of the KindInfer stream protocol (wire format, limits, refusals) in one
// Forwarder.
//
// Consumer side: ForwardRemote is the proxy's RemoteForwarder. It opens
// one KindInfer stream per request on the existing link (never dials),
// sends a versioned JSON head (method, path, query, Content-Type, Accept),
// the body in MeshChunkBytes frames and an end frame, and relays the
// response: a stream's head at once, any other head with its first body
// byte, so a link that dies between the two leaves nothing written. A
// failure before the peer answered wraps proxy.ErrNotAnswered, a busy
// peer's refusal proxy.ErrPeerBusy; refusals are *proxy.Error.
//
// Serving side: ServeStream is the mesh's KindInfer handler. It reads the
// head within MeshFirstFrameTimeout, requires the table's LocalForPeerHeld
// (the Hold given back once answered), takes a per-peer and a total slot
// (429 over them), pins the body's "model" (package modelpin: whole when
// it is at most proxy.MeshBufferedBodyBytes, as it streams otherwise),
// forwards to the local instance only (httpfast.Pool, or net/http's
// transport for a streamed body) and streams the answer back one frame
// per upstream read.
//
// # Invariants
//
// Every size is checked before anything derived from it is
// allocated; what either side holds of a body is a chunk whatever the
// mesh body limit (nodeld_proxy_mesh_body_bytes); a peer's bytes are
// refused with a stable code and a generic message, recorded through
// Deps.Recorder keyed by peer and code, or reset the stream with a
// mesh.StreamCode; peer-sent role names label metrics only when exposed.
// The Fuzz targets cover every decoder of peer bytes.
//
// # Concurrency
//
// A Forwarder starts no goroutine; ForwardRemote runs on the
// proxy's handler goroutine, ServeStream on the mesh's stream goroutine.
// Both, SetLimits and Prepare are safe for concurrent use. ForwardRemote
// tries once: the proxy's routing loop owns a forward's retry.
//
// The long story is docs/architecture.md section 3.
package meshproxy
