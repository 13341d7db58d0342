// Package demand is how a node learns that a role it has no route for can
// be started on demand, and how it asks: the controller's standby
// advertisements (demand:<role>, sent only to the nodes on the workload's
// demand_from: Advertiser), the consumer's Holds (Expect and Want, the
// proxy's plug for a held request; ModelsJSON, its GET /v1/models of a
// cold role), and the demand call, a signed request on a KindDemand
// stream answered with a signed state or refusal (Client, Server). What a
// demand starts is the controller's (DemandHandler).
//
// # Invariants
//
//   - Default deny: a standby goes only to a peer on its DemandFrom, and
//     the Server hands a demand to the handler only from such a peer (or
//     this node); anything else is refused not_allowed, counted and
//     chained through the shared chain.Recorder.
//   - A call is bound to its link: signed by the key the link
//     authenticated, for this node, within its lifetime, its nonce used
//     once (ctl.PeerNonceGuard); the answer is signed and checked against
//     the controller's pinned key and the call's nonce.
//   - Load is bounded before it reaches the handler: a token bucket per
//     peer (DemandRate, DemandBurst) before any signature is checked, at
//     most one handler call in flight per role, and on the consumer at most
//     one call in flight and one per DemandInterval per role.
//   - Every received byte is bounded (MaxRequestBytes, MaxResponseBytes)
//     and decoded strictly before it is trusted.
//
// # Concurrency
//
// Holds, Client, Server and Advertiser are safe for concurrent use. Holds
// starts one goroutine per demand call, only while its Run runs; Run
// returns once they all have. The Server runs on the mesh's stream
// goroutines and starts none.
//
// The long story is docs/internals.md "internal/demand".
package demand
