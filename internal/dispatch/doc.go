// Package dispatch is the caller side of workload.ctl on a node: it signs
// calls with the node key and sends them over the node's mesh links (or
// to the local workload host for "self"), serves the files of the
// packages it places to the host fetching them, and serves the operator
// unix socket that `nodeld ctl` talks to.
//
// # Calls
//
// Dispatcher.Call resolves a node reference (a node id, a configured
// peer's name, or "self") to its pinned key, so an answer signed by any
// other key is refused, and sends one call per fresh mesh stream
// (mesh.KindCtl) through ctl.Client. A mutating call is chained first
// (KindDecision, source AuditSource): the entry's hash is the decision id
// the call carries, and a decision that cannot be chained is never sent.
// Every mutating call's outcome is chained too (KindOutcome). Errors keep
// the classes of ctl.CallError: a signed refusal is ClassRefused, a call
// that never left (no link, unknown node, no local host) is
// ClassUnreachable, and a mutating call that left without a valid answer
// is ClassIndeterminate.
//
// # Places
//
// VerifyPackage checks a package directory for its callers: the
// signatures against the anchors it is given and the revocation list on
// every call (cheap), the files' sizes and SHA-256 once per manifest hash
// (MaxVerifiedPackages are remembered; a listed file whose size, mode or
// modification time changed since is hashed again). The VerifiedPackage
// it returns is an immutable value.
//
// PlaceDecided places a VerifiedPackage under a decision its caller made
// and chained (a controller's), after checking the package against its
// revocation list again. Place is the operator's: it verifies with the
// package's own signers as anchors and no revocation list (the package
// must be intact and signed by someone; the host checks its own trust
// anchors and revocations), chains its own decision, and sends through
// the same path.
//
// # Artifacts
//
// A package is offered to the target under the call's decision id while
// the call runs. Offers are keyed by decision and target, so a
// controller's decision can fall through to its next candidate at once.
// A PlaceDecided offer is withdrawn when its call ends, so a candidate the
// controller moved on from cannot fetch and load later; an operator
// Place keeps its offer OfferGrace longer, for a host resuming a fetch.
// The host opens a mesh.KindArtifact stream to this node and sends
// one ctl.FrameFetch {v, decision_id, path, offset}; the answer is
// ctl.FrameHeader {size, offset}, ctl.FramePiece frames (32-byte SHA-256
// of the piece, then at most ctl.MaxPieceBytes bytes), ctl.FrameEnd; or
// one ctl.FrameRefusal {code, message} with code not_offered, not_listed,
// bad_request or io. The wire format and its decoders are ctl's
// (ctl/artifact.go), shared with the host's fetcher. One file per
// stream. A file is served only for a decision offered to the node
// asking (the stream's authenticated id; any other node is told
// not_offered, as for an unknown decision), only for a path
// the decision's verified manifest lists, only from an offset within the
// file, through an os.Root with no symbolic link on the way, and only if
// the file still has its listed size. The request frame is read (within
// ArtifactRequestTimeout) and checked against the offers before any slot
// is taken, so a stream that sends nothing, or asks for what its peer is
// not offered, holds none; an authorised fetch then takes one of its
// peer's MaxArtifactStreamsPerPeer slots and one of the
// MaxConcurrentArtifactStreams, waiting at most ArtifactSlotWait. A fetch
// that finds no slot in time has its stream reset, without a refusal (a
// refusal would end the host's fetch; a reset is resumed with backoff),
// and is counted busy in nodeld_dispatch_artifact_streams_total.
//
// # Operator socket
//
// OperatorServer listens on a unix socket (never TCP): mode 0600, or
// 0660 with a configured group, bound under a temporary name and renamed
// into place so it is never reachable with a looser mode; a missing
// parent directory is created 0700; an existing socket file is removed
// only when nothing answers on it. Each connection carries one JSON line
// request (OperatorRequest, at most MaxOperatorRequestBytes) and gets one
// JSON line answer (OperatorResponse) with the class ok, refused,
// unreachable, indeterminate or error. DialOperator is the client. The
// server reads, bounds and answers; what a verb does is its
// OperatorBackend's: the Dispatcher serves the per-node verbs, and a
// controller plugs its own verbs in with a backend that serves them and
// hands the rest to the Dispatcher, without a change here.
//
// # Concurrency
//
// New and NewOperatorServer start nothing. A Dispatcher is safe for
// concurrent use; a call to "self" runs the local host on a goroutine it
// waits for before returning. Artifact streams run on the mesh's stream
// goroutines. OperatorServer.Run owns the accept loop and one goroutine
// per connection (at most MaxOperatorConns, further ones are answered
// busy), cancels requests in progress when its ctx ends, and waits for
// all of them before it returns.
package dispatch
