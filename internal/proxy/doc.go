// Package proxy is nodeld's per-role loopback OpenAI proxy: one net/http
// server per role, on a fixed loopback address, that forwards each request
// to wherever the placement table says the role is served right now: a
// local instance (through httputil.ReverseProxy) or a peer (through the
// mesh, via RemoteForwarder). Clients keep one URL while instances move.
//
// # What is served
//
// GET and POST only (405 with Allow otherwise). Paths: /v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/models, /health and Ollama's read and
// inference API (/api/generate, /api/chat, /api/embed, /api/embeddings,
// /api/tags, /api/show, /api/version, /api/ps) go local or remote; any other
// /v1/... path goes to local instances only (404 local_only_path when the
// role is served by a peer). Ollama's management API (/api/pull,
// /api/delete, /api/create, /api/push, /api/copy, /api/blobs/...) is 403;
// anything else 404. A request target not in canonical origin form (not
// starting with one '/', "//", "." or ".." segments, %2e/%2f/%5c/%00 in any
// case, backslash, controls, or a percent-encoding other than the one Go
// produces) is 400, so what is checked is exactly what is forwarded.
//
// # Guards, in order
//
// Method (405), path (400/403/404), Host must be a loopback host
// (localhost, 127.0.0.0/8 or [::1], optional port) else 403
// forbidden_host, a present Origin must be http://<loopback host> else 403
// forbidden_origin (403 rather than 421: the request is refused, not
// misdirected), Content-Length over MaxBodyBytes 413 (and the body is also
// bounded while streaming by http.MaxBytesReader), nothing resolving 503
// "no instance serves role 'X'", a peer target while the mesh is not
// running 503 mesh_not_running (503 like no instance: this node cannot
// reach anything that serves the role, and clients retry both alike), over
// the role's concurrency 429 (admission never queues). Errors are
// OpenAI-style JSON {"error":{"message","type","code"}}; codes are stable.
//
// # Forwarding
//
// Local: Rewrite (never Director) sets only the destination; request
// headers go unchanged (Authorization included) except hop-by-hop ones and
// Upgrade; Host becomes the instance's address; X-Forwarded-* are not
// added. The response head is relayed as is (minus hop-by-hop headers)
// plus X-Nodeld-Route: local (or the peer's node id for remote). Bodies
// are flushed on every write (FlushInterval -1), so SSE and chunked
// responses are never buffered. One shared http.Transport keeps
// connections alive to upstreams; the servers keep them alive to clients.
// A client that goes away cancels the upstream request. A watchdog cancels
// a request after StallTimeout without upstream bytes (head or body) or
// after RequestTimeout: 504 before the response head, a cut stream after
// it. Any failure after the head is sent cuts the stream
// (http.ErrAbortHandler); responses over MaxResponseBytes are cut too.
// Remote: the body is read into memory, bounded by MeshMaxBodyBytes, and
// handed to RemoteForwarder with the same watchdog on the client writes;
// every write of the forwarder is flushed to the client at once.
//
// # Mesh forwarding (MeshForwarder)
//
// ForwardRemote (consumer) opens one KindInfer stream per request on the
// existing link (never dials; no handshake per request), after refusing a
// body over the mesh limit or a path other than the four /v1 inference
// paths, sends a versioned JSON head (method, path, query, Content-Type,
// Accept only), the body in MeshChunkBytes frames and an end frame, and
// relays the response head and each body frame as it arrives. Its ctx
// ending resets the stream, which cancels the serving node's upstream
// request. ServeStream (serving node) reads the head within
// MeshFirstFrameTimeout, requires LocalForPeer, takes a per-peer and a
// total slot (429 over them), pins "model", forwards to the local
// instance only and streams back one frame per upstream read. Refusals
// carry a stable code and a generic message and are recorded
// ("infer.mesh.refused") through MeshDeps.Recorder, the daemon's shared
// rate-limited recorder, keyed by the peer and the code; broken framing
// resets the stream
// with a mesh.StreamCode* code. Both are counted. MeshForwarder starts no
// goroutine of its own; ServeStream runs on the mesh's stream goroutine.
//
// # Concurrency and goroutines
//
// Run owns one Serve goroutine per role and one drain goroutine per role
// being stopped, and waits for all of them (and for the roles' handlers)
// before returning. Handlers run on net/http's goroutines and share only
// atomics (limits, in-flight counts) and the Resolver, which must be safe
// for concurrent use. ApplyConfig, Addr, Inflight and Ready are safe to
// call from any goroutine; ApplyConfig calls are serialised. Ports and
// Resolver are never called with the proxy's lock held.
package proxy
