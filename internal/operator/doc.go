// Package operator is the operator surface of nodeld: the operator socket
// that nodeld ctl talks to, its request and response types, every verb and
// its refusal codes, and the router that hands each request to the
// component that serves it.
//
// Server listens on a unix socket (never TCP): mode 0600, or 0660 with a
// configured group, bound under a temporary name and renamed into place so
// it is never reachable with a looser mode; a missing parent directory is
// created 0700; an existing socket file is removed only when nothing
// answers on it. Each connection carries one JSON line request (Request, at
// most MaxOperatorRequestBytes, unknown fields and trailing data refused)
// and gets one JSON line answer (Response) with the class ok, refused,
// unreachable, indeterminate or error. Dial is the client. The server
// reads, bounds and answers; what a verb does is its Backend's.
//
// Router is the daemon's Backend. It routes to small interfaces declared
// here: the per-node verbs (describe, place on a named node, start, stop,
// unload, status, logs, revoke, unrevoke) to the dispatcher
// (*dispatch.Dispatcher implements Backend), and the controller's verbs (a
// place the engine chooses, explain, placements, workloads, nodes, and
// start, stop and unload of what it placed) to a Controller
// (*plane.Controller). Without a controller those are refused with
// CodeNoController. ControllerStatus is the controller's part of
// /v1/status. Node references are resolved by the one resolver the daemon
// gives (config.ResolveNodeRef).
//
// # Concurrency
//
// NewServer and NewRouter start nothing. Server.Run owns the accept loop and
// one goroutine per connection (at most MaxOperatorConns; further ones are
// answered busy), cancels requests in progress when its ctx ends, and waits
// for all of them before it returns. A Router keeps no state of its own and
// is safe for concurrent use as far as what it routes to is.
package operator
