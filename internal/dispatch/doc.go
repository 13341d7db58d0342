// Package dispatch is the caller side of workload.ctl on a node: it signs
// calls with the node key and sends them over the node's mesh links (or to
// the local workload host for "self"), serves the files of the packages it
// places to the host fetching them (mesh.KindArtifact), answers the
// operator's per-node verbs (it is internal/operator's Backend), and is the
// controller's plane.Dispatcher (ForController).
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
//   - NODE is resolved by config.ResolveNodeRef (a node's own node.name
//     included); a name it does not know goes to the mesh's lookup.
//
// # Concurrency
//
// New starts nothing. A Dispatcher is safe for concurrent use; a call to
// "self" runs the local host on a goroutine it waits for. Artifact streams
// run on the mesh's stream goroutines.
//
// The long story (calls, places, artifacts, the operator socket) is
// docs/internals.md "internal/dispatch".
package dispatch
