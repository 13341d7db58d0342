// Package dispatch is the caller side of workload.ctl on a node: it signs
// calls with the node key and sends them over the node's mesh links (or to
// the local workload host for "self"), serves the files of the packages it
// places to the host fetching them (mesh.KindArtifact), and serves the
// operator unix socket that `nodeld ctl` talks to, handing each verb to an
// OperatorBackend.
//
// # Invariants
//
//   - An answer is verified against the target's pinned key. A mutating
//     call is chained first (its entry hash is the decision id it carries)
//     and never sent when it cannot be; its outcome is chained too. Errors
//     keep ctl.CallError's classes: refused, unreachable, indeterminate.
//   - A file is served only for a decision offered to the node asking,
//     only for a path its verified manifest lists, through an os.Root with
//     no symbolic link, and only while it has its listed size; a fetch takes
//     a bounded slot (per peer and in total) only after its request checks.
//   - The operator socket is never TCP and never reachable with a looser
//     mode than 0600 (0660 with a group); one bounded JSON line in, one out.
//
// # Concurrency
//
// New and NewOperatorServer start nothing. A Dispatcher is safe for
// concurrent use; a call to "self" runs the local host on a goroutine it
// waits for. Artifact streams run on the mesh's stream goroutines.
// OperatorServer.Run owns the accept loop and one goroutine per connection
// (at most MaxOperatorConns), cancels requests in progress when its ctx
// ends and waits for all of them.
//
// The long story (calls, places, artifacts, the operator socket) is
// docs/internals.md "internal/dispatch".
package dispatch
