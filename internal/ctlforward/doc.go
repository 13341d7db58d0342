// Package ctlforward carries the controller's writes from a follower
// controller to the leader over the mesh, so that nodeld ctl works
// against any controller (issue 25). A follower's operator.Router hands a
// write it does not lead for (place by package id, start, stop, unload)
// to Forward, which sends the operator Request, as the socket carries
// it, on one mesh.KindOperator stream to the leader; the leader's
// ServeStream decodes it and answers one operator Response from its
// Router's OperateForwarded.
//
// # Invariants
//
//   - A KindOperator stream is served only from a controller voter (the
//     node id of the key the mesh authenticated); any other peer's is
//     reset with CodeNotVoter before a byte is read, counted and logged.
//     A node with no voters (a single controller) registers no handler.
//   - A request is one frame of at most operator.MaxOperatorRequestBytes,
//     decoded strictly (unknown fields and trailing data refused); an
//     answer is one frame of at most MaxResponseBytes, decoded strictly.
//     A malformed or oversized stream is reset and changes nothing.
//   - The leader never forwards a forwarded request again
//     (Router.OperateForwarded); Forward reports ErrForwardNotSent only
//     when the leader cannot have acted.
//
// # Concurrency
//
// New starts nothing (it registers ServeStream on the mesh). ServeStream runs on the mesh's stream
// goroutine and Forward on its caller's; both return within their
// bounds (RequestReadTimeout, PlaceWait, CallWait). Forwarder keeps no
// mutable state but its metrics and is safe for concurrent use.
package ctlforward
