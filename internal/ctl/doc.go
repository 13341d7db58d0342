// Package ctl is the workload.ctl message layer: the eight methods, signed
// request and response envelopes, request verification on the target, the
// nonce guard, refusal codes, response binding on the caller, outcome
// classification, and a transport-agnostic framing of one call per stream
// (Server.Serve on the target, Client.Call on the controller). A
// *mesh.Stream is a Stream (its Close ends both directions); ctl knows
// nothing of QUIC.
//
// Wire format. A stream carries one call: the request message, then the
// response message. A message is one signed envelope, split into frames
// of [type byte][u32 big-endian length][payload] (FrameMore... FrameLast):
// mesh frames, written and read with mesh.WriteFrame and mesh.ReadFrame.
// The envelope is the JSON object
//
//	{"payload":"<base64 of the exact payload bytes>","public_key":"<64 hex>","signature":"<128 hex>"}
//
// and the signature is ed25519 over the domain tag (RequestDomain or
// ResponseDomain), one NUL byte, then the payload bytes. Base64 lets the
// verifier see exactly the signed bytes; it verifies them, then parses
// them strictly (unknown fields and trailing data refused). Nothing is
// ever re-serialised to verify. Hex is lower-case only. A response is
// flat: version, method, responder, request_nonce, outcome ("ok" with
// result, or "refused" with refusal {code, reason}).
//
// Artifact streams. The package fetch of a place (reference section
// 2.11) runs on mesh.KindArtifact streams, one file per stream; its wire
// format (FetchRequest, FetchHeader, pieces, ArtifactRefusal) and strict
// decoders are in artifact.go, shared by the host (fetcher) and dispatch
// (holder). Decoder errors wrap ErrArtifactMalformed.
//
// Host contract. Besides the calls, ctl holds what a controller reads
// from workload hosts, so both sides take it from one place: the lifecycle
// states of an instance (StateLoaded, StateRunning, ...), the reasons of a
// departed one (DepartedUnloaded, DepartedRevoked), the instance config a
// place carries and the deterministic instance id it yields (InstanceConfig,
// InstanceID: a controller knows the id before it sends the place), and
// the workload-host advertisement's name and metadata (HostAdvertName,
// HostMetadata, ParseHostMetadata; instance.go and hostadvert.go).
//
// Invariants:
//   - Verification runs in the order of Verifier.VerifyRequest (reference
//     section 2.7 with the QUIC peer binding after the requester check);
//     the first failure names the refusal, and the nonce is burned last,
//     only for a request that passed every other check.
//   - Controllers and the other peers have separate nonce guards. The
//     controllers' holds at most MaxNonces live nonces; the peers'
//     (PeerNonceGuard) at most MaxPeerNonces per peer, with a reserve of
//     PeerNonceReserve each and a pool of MaxNonces beyond the reserves,
//     so one peer flooding cannot lock the others out. Both fail closed
//     (replay) when full; the peers' drops expired nonces on every insert.
//     A peer's read-only request lives at most MaxReadOnlyLifetime (a
//     Client sends them with ReadOnlyTTL), so its nonces leave the guard
//     soon.
//   - Every request read whole gets a signed answer, refusals of
//     unauthenticated requests included; Serve then closes the stream.
//     Serve reports whether the request was authenticated, and the
//     verified request, so the host can tell a controller's refused
//     decision (chained as such) from refusals any peer can repeat
//     (chained through its rate-limited recorder).
//   - A response is accepted only for its own request: nonce, method,
//     responder node id (= the target unless *), and the expected key.
//   - A mutating call that left without a valid signed answer is
//     ClassIndeterminate, never ClassUnreachable; read-only calls are
//     never indeterminate.
//   - Decision ids are 64 lower hex; the target checks only their form.
//   - Every size bound is a named constant in limits.go, checked before
//     the memory it guards is allocated.
//
// Differences from the reference: the envelope payload is base64, not a
// JSON string; the response outcome is flat; one call per stream; the
// refusal code peer_mismatch is new; the node-admin methods and the
// response's trailing raw frame are not carried.
//
// Concurrency: Verifier, NonceGuard, Server and Client are safe for
// concurrent use. The package starts no goroutines of its own;
// Serve and Call use context.AfterFunc to close their stream when ctx is
// done and wait for that close before returning.
package ctl
