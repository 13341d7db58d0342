// Package proxy is nodeld's per-role loopback OpenAI proxy: one server per
// role, on a fixed loopback address, that forwards each request to wherever
// the placement table says the role is served right now: a local instance,
// through the HTTP/1.1 client of package httpfast, or a peer, through the
// RemoteForwarder that package meshproxy implements. Clients keep one URL
// while instances move. It owns the role servers, the guards, the routing
// and the OpenAI- and Ollama-shaped errors.
//
// # Invariants
//
//   - Guards run in order before any byte goes upstream: method, path in
//     canonical origin form (so what is checked is what is forwarded),
//     loopback Host and Origin (the DNS-rebinding guard), declared size,
//     resolve, remote checks, concurrency (never queues), body deadline.
//   - Only loopback is ever dialled on the local path; a request gets the
//     same "model" pinning (modelpin.Pin) whether served here or by a peer.
//   - Error codes are stable; a remote forward is retried once, on the next
//     candidate, only when the link failed before anything was relayed and
//     the body is still held (ErrNotAnswered).
//   - A request for a role expected back is held (hold.go), not refused:
//     FIFO per role, no slot held; a stream cut mid-answer is never held;
//     one that then finds no free slot (here, or ErrPeerBusy) before
//     anything was relayed backs off and tries again until its wait ends.
//   - Every size and time is bounded: MaxBodyBytes, BodyTimeout,
//     StallTimeout, RequestTimeout, MaxResponseBytes, MaxConnections.
//
// # Concurrency
//
// Run owns every goroutine it starts (per role: the accept loop, net/http's
// Serve of handed-off connections, a drain while the role stops) and waits
// for them and for the handlers before it returns. Handlers share only
// atomics, the Resolver (which must be safe for concurrent use), each
// role's performance samples and the activity log under short mutexes.
// ApplyConfig, Prepare, Addr, Inflight, Held and Ready are safe from any
// goroutine; a Prepared reload holds the reload lock until Commit or
// Abort. Ports and Resolver are never called with the proxy's lock held.
//
// The long story (what is served, serving a role port, each guard, the
// forwarding rules, measured performance) is docs/internals.md
// "internal/proxy"; the path of a request is docs/architecture.md section 3.
package proxy
