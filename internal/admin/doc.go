// Package admin serves the node's read-only admin HTTP API on loopback:
// /healthz (the process is alive), /readyz (every listener is bound and
// the chain is writable; it names the conditions not met, with the error
// of a failing check), /metrics (the registry made in run) and /v1/status
// (a JSON document the caller assembles), and, only while admin.pprof is
// on (Config.Pprof, SetPprof), Go's profiles under /debug/pprof/
// (net/http/pprof's handlers; 404 while off). A profile may run up to the
// server's 30 s write timeout. With Deps.UI, the fleet page's routes are
// served under /ui/ (internal/fleetui) and / redirects there.
//
// # Invariants
//
// Nothing served here mutates the node; mutating operator
// calls go over the local unix socket, never this port. The listen
// address must be loopback (config validation enforces it; New checks
// again). Every route applies the role ports' DNS-rebinding and
// cross-origin guard (grammar.CheckLoopbackRequest): a Host that is not a
// loopback authority, or an Origin that is not one loopback origin, is 403
// before any handler runs, so a web page cannot read /v1/status through a
// name it rebinds to 127.0.0.1.
//
// # Concurrency
//
// Server is safe for concurrent use. Run owns the HTTP
// server's goroutines and returns after a graceful shutdown once its
// context is cancelled; requests' contexts end with it, so an event
// stream does not outlive it. Readiness is a set of named conditions, each
// flipped by its owner with SetReady, or evaluated on every Ready call
// from a Check function that must not block.
//
// What /metrics and /v1/status show is README.md "Metrics and status";
// where admin sits is docs/architecture.md section 1.
package admin
