// Package grammar holds the syntax rules that more than one package
// enforces: names (roles, peers, workloads, packages, variants, label keys),
// node names, versions, instance ids, label values, environment variable
// names, health check paths, capability ids and the capability vocabulary,
// attribute values (Value), the runtime kinds nodeld knows, and what counts
// as a loopback address. Each rule has exactly one home here, so config
// check refuses what the component that later consumes a value would
// refuse.
//
// # Invariants
//
//   - A Name is 1 to MaxNameLen bytes of words of a-z 0-9 _ -, joined by
//     single dots: never "." or "..", never '/', upper case or a byte that
//     JSON, a URL path or a log line would escape. A node name may also
//     hold upper case (compare with strings.EqualFold).
//   - The capability vocabulary (provenances, states, predicate operators,
//     attribute names, the trust family no node may claim) is defined once,
//     in capability.go, for facts, manifests and the engine.
//   - A Value's JSON form keeps its kind across a round trip, and decoding
//     refuses anything else before building it.
//   - Loopback parsers return an IP literal (never a name to look up, never
//     a zone); every refusal matches ErrNotLoopback and never repeats the
//     input.
//
// # Concurrency
//
// It is a leaf: it imports the standard library only, and every package
// may import it, the isolated table, chain and engine included. It does no
// I/O, keeps no state and reads no clock; every function is a pure
// predicate or parser, safe for concurrent use.
//
// The long story (every rule in full) is docs/internals.md
// "internal/grammar".
package grammar
