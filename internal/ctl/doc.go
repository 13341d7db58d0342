// Package ctl is the workload.ctl message layer: the eight methods, signed
// request and response envelopes, request verification on the target, the
// nonce guards, refusal codes, response binding on the caller, outcome
// classification, and a transport-agnostic framing of one call per stream
// (Server.Serve on the target, Client.Call on the caller). It also holds
// the artifact fetch's wire format (artifact.go) and the contract a
// controller reads from hosts: instance states, departed reasons,
// InstanceID, the workload-host advertisement. It knows nothing of QUIC.
//
// # Invariants
//
//   - A message is one signed envelope; the signature covers exactly the
//     payload bytes sent, which are verified as received, then parsed
//     strictly. Nothing is re-serialised to verify.
//   - Verification runs in the order of Verifier.VerifyRequest; the first
//     failure names the refusal, and the nonce is burned last, only for a
//     request that passed every other check. Controllers and other peers
//     have separate, bounded nonce guards that fail closed when full.
//   - A controller's raft term travels inside the signed bytes, in a
//     VersionTerm request only, so an older host refuses it, never ignores it.
//   - Every request read whole gets a signed answer; a response is accepted
//     only for its own request (nonce, method, responder, key).
//   - A mutating call that left without a valid answer is
//     ClassIndeterminate, never ClassUnreachable; read-only calls never are.
//   - Every size bound is a named constant in limits.go, checked before the
//     memory it guards is allocated.
//
// # Concurrency
//
// Verifier, the nonce guards, Server and Client are safe for concurrent
// use. The package starts no goroutine of its own; Serve and Call close
// their stream when ctx is done (context.AfterFunc) and wait for that
// close before returning.
//
// The long story (wire format, artifact streams, the host contract, each
// invariant in full) is docs/internals.md "internal/ctl".
package ctl
