// Package operator is the operator surface of nodeld: the operator socket
// that nodeld ctl talks to, its request and response types, every verb and
// its refusal codes, and the router that hands each request to the
// component that serves it.
//
// Server serves one JSON line Request per connection on a unix socket and
// answers one Response (class ok, refused, unreachable, indeterminate or
// error); Dial is the client. Router is the daemon's Backend: per-node verbs
// go to the dispatcher (Backend), the controller's verbs to a Controller
// (*plane.Controller); ControllerStatus is the controller's part of
// /v1/status, and NodeStatus assembles the whole document from what it
// reads through StatusSources. docs/internals.md has the long story.
//
// # Invariants
//
// The socket is never TCP and never reachable with a looser mode than 0600
// (0660 with a configured group): it is bound under a temporary name and
// renamed into place; an existing socket file is removed only when nothing
// answers on it. A request is at most MaxOperatorRequestBytes; unknown
// fields and trailing data are refused. Without a controller its verbs are
// refused with CodeNoController. Node references are resolved by the one
// resolver the daemon gives (config.ResolveNodeRef). A follower controller's
// writes go to the leader through a Forwarder or are refused CodeNotLeader
// (a package directory always is); a request served by OperateForwarded is
// never forwarded again.
//
// # Concurrency
//
// NewServer and NewRouter start nothing. Server.Run owns the accept loop and
// one goroutine per connection (at most MaxOperatorConns; further ones are
// answered busy), cancels requests in progress when its ctx ends, and waits
// for all of them before it returns. A Router keeps no state of its own and
// is safe for concurrent use as far as what it routes to is.
package operator
