// Package proxy is nodeld's per-role loopback OpenAI proxy: one server per
// role, on a fixed loopback address, that forwards each request
// to wherever the placement table says the role is served right now: a
// local instance (through its own HTTP/1.1 client) or a peer (through the
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
// /api/delete, /api/create, /api/push, /api/copy, /api/blobs/...) is 403
// whatever the method; anything else 404. When the role's instance is an
// Ollama (its table runtime, local or on a peer), HEAD and GET / (and
// only "/") are answered here as Ollama answers them, 200 "Ollama is
// running", since Ollama's CLI checks HEAD / before list, run or ps;
// otherwise they keep the 405 and 404 above. A request target not in canonical origin form (not
// starting with one '/', "//", "." or ".." segments, %2e/%2f/%5c/%00 in any
// case, backslash, controls, or a percent-encoding other than the one Go
// produces) is 400, so what is checked is exactly what is forwarded.
//
// # Serving a role port
//
// A role's connections are read by a small HTTP/1.1 reader of the common case
// (httpfast.Server): GET or POST, HTTP/1.1, a head within 4 KiB with one
// Host, at most one Content-Length and no Transfer-Encoding, Expect or
// Upgrade, every line a valid name and value. Its requests reach the same
// handler as net/http's would, as *http.Request with a ResponseWriter that
// writes HTTP/1.1 itself (Date, Content-Length or chunked framing, the
// read deadline of http.ResponseController). The first request outside
// that case hands the connection, with the bytes read so far, to the
// role's net/http server for the rest of its life, so anything unusual is
// parsed, refused or served exactly as net/http does (FuzzReadHead checks
// that every head the reader serves parses the same in net/http). A body
// the handler left unread is read and dropped before the response when
// it is at most 256 KiB, else the connection closes after the response,
// lingering up to 500 ms so the client reads it. A client that goes away
// is noticed by a read of its connection that starts only for an
// exchange still running 20 ms after its body was read (net/http starts
// one per request), and cancels the exchange. Each exchange has a context
// of its own (httpfast.Context, cheaper than context.WithCancelCause) that
// the local forward uses directly; the head's and the body's read
// deadlines are set on the connection only before a read that reaches it.
//
// A new connection must send its first request head within HeaderTimeout
// of being accepted (the wait for its first byte included, as net/http's
// ReadHeaderTimeout does), else it is closed; only between requests may
// it stay idle for up to 120 s. Each role's listener holds at most
// MaxConnections client connections at once (conngate.go), idle or busy,
// whichever server reads them: one accepted over the cap is closed at
// once, unanswered, counted in nodeld_proxy_connections_refused_total and
// logged at most once a minute, while the connections held keep being
// served. nodeld_proxy_client_connections shows the count. A reload
// applies a new cap to the next connection accepted.
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
// the role's concurrency 429 (admission never queues). Once admitted, the
// body must arrive within BodyTimeout of the request (the connection's
// read deadline, on both paths), else 408 body_timeout and the slot is
// free: the watchdog counts body bytes as activity, so without it a client
// trickling its body held the slot until RequestTimeout on the local path,
// and for as long as it kept sending on the remote path, where the body is
// read before forwarding. Errors are OpenAI-style JSON
// {"error":{"message","type","code"}}; codes are stable. On Ollama's /api/
// paths they take Ollama's shape, {"error":"<message>"}, which its clients
// print (they fail to decode the OpenAI shape there).
//
// # Forwarding
//
// Local: the proxy's own HTTP/1.1 client (httpfast.Pool,
// relayLocal) does what httputil.ReverseProxy with Rewrite did, in the
// handler's goroutine: only the destination changes; request headers go
// unchanged (Authorization included) except hop-by-hop ones, the ones a
// Connection header names, and Upgrade; Host becomes the instance's
// address; the client's Forwarded and X-Forwarded-* are dropped and none
// are added. The body streams
// to the instance, except on the inference POST
// paths (OpenAI's and Ollama's, pinnedPaths) when the instance's model is
// known and the role has no ModelPassthrough: the body is then read into
// memory (MaxBodyBytes, BodyTimeout) and its "model" pinned to the
// instance's by modelpin.Pin, the rule of the serving side of the mesh, so a
// request gets the same answer wherever the role is served (the original
// pinned over the mesh only; this departs from it on purpose). A body
// naming that model already, or that is not one JSON object, goes as
// sent. The response head is relayed as is (minus hop-by-hop headers)
// plus X-Nodeld-Route: local (or the peer's node id for remote). Bodies
// are flushed on every write (FlushInterval -1), so SSE and chunked
// responses are never buffered (a stream's head is sent at once).
// Connections to instances are kept alive: an exchange writes the request
// head and an in-memory body in one syscall and reads the response on the
// handler's goroutine (a common head, HTTP/1.1 with one Content-Length,
// by its own parser that FuzzResponseHead checks against
// http.ReadResponse; any other by net/http); an idle connection holds no goroutine and is
// checked with a non-blocking peek before reuse (an exchange that fails
// on a reused connection before any response byte is retried once on a
// new one when its body is in memory); at most the role's concurrency
// stay idle per role and instance (a reload lowering it closes the
// surplus), none longer than 90 s. The servers keep connections alive to
// clients. An upstream response head over MaxUpstreamHeaderBytes (64 KiB)
// is 502, on this client and on the transport serving peers' requests.
// A client that goes away cancels the upstream request. A watchdog cancels
// a request after StallTimeout without upstream bytes (head or body) or
// after RequestTimeout: 504 before the response head, a cut stream after
// it. Any failure after the head is sent cuts the stream
// (http.ErrAbortHandler); responses over MaxResponseBytes are cut too.
// Remote: a body of at most MeshBufferedBodyBytes (64 KiB) is read into
// memory and handed to RemoteForwarder (so it can go to a second peer); a
// larger one, or one of unknown length that turns out larger, is streamed
// to the peer as the client sends it; both bounded by MeshMaxBodyBytes and
// BodyTimeout, with the same watchdog on the client writes; every write of
// the forwarder is flushed to the client at once.
//
// # Mesh forwarding
//
// The RemoteForwarder is package meshproxy's Forwarder (both sides of the
// KindInfer protocol). The contract it keeps with the proxy lives here
// (remote.go): ErrNotAnswered asks for the one retry on the next
// candidate (Resolver.ResolveExcept; the same peer when the link led to a
// previous run of it, mesh.PeerRestarted), only while nothing was relayed
// and the body is held; a WaitingForLink target whose wait ends without a
// link, or whose new run answers ErrPeerNotServing, with no other
// candidate, is 503 no_instance; MeshPathRefusal says which paths cross
// the mesh; a *proxy.Error is answered as is.
//
// # Measured performance
//
// For each role the proxy keeps the time to first byte of the last
// PerfWindow inference requests (POST to an inference path) its local
// instance answered 200, and, for OpenAI completions, the tokens per
// second their final usage report implies (completion_tokens over the
// time from first to last byte of a stream, over the whole exchange
// otherwise; at least MinPerfTokens). Finding the usage costs a copy of
// at most 1 KiB per response write into a pooled ring holding the
// response's end, and one search of it when the response ends; no chunk
// is parsed. Requests served to peers over the mesh are not measured.
// LocalPerf returns the medians, computed when asked, for roles whose
// local instance is still the one the samples came from; cmd/nodeld
// hands them to the signed facts as perf.infer.<role> records.
//
// # Concurrency and goroutines
//
// Run owns, per role, its accept goroutine (the fast reader's, or
// net/http's Serve) and, with the fast reader, net/http's Serve of the
// handed-off connections, plus one drain goroutine per role being
// stopped, and waits for all of them (and for the roles' handlers) before
// returning. The fast reader runs one goroutine per connection, and one
// more for the watch of a client during a long exchange; a drain waits
// for them. Handlers run on these or on net/http's goroutines and share only
// atomics (limits, in-flight counts), the Resolver, which must be safe
// for concurrent use, and each role's performance samples, under a mutex
// held for a few stores. ApplyConfig, Prepare, Addr, Inflight and Ready are
// safe to call from any goroutine; reloads are serialised: a Prepared
// reload holds the reload lock until its Commit or Abort, so Run's start
// and stop, and the next Prepare, wait for it (a reload binds new role
// ports in Prepare, so that a port in use fails before anything changed).
// Ports and Resolver are never called with the proxy's lock held.
package proxy
