// Package engine is the placement engine: a pure function, Place, that
// decides on which node a workload goes and explains every choice and
// every rejection. The controller (internal/plane) converts what it knows
// into the engine's own input types (a Request, one Node per node, the
// Cluster, Weights); the engine imports only internal/grammar, whose
// capability vocabulary it uses rather than redefines. Phase A rejects
// every node that fails a hard constraint, each with a stable Code; phase B
// scores the survivors and ranks them by tier, then score, then node id.
// Evict, as pure, chooses the cheapest idle on-demand instances to unload
// when no node has room for a demanded workload by declared resources.
//
// # Invariants
//
//   - Pure: no clock, no I/O, no logger, no goroutine, no randomness, no
//     package-level mutable state, no dependence on map iteration or on the
//     order of nodes. The same input gives the same Decision; Place never
//     modifies its arguments.
//   - Every node given appears in Decision.Candidates, with its score
//     breakdown or every constraint it fails.
//   - The chosen node passes every constraint, and its route's memory
//     demand plus its pending reservations fits every pool it draws on.
//   - An eligible candidate never ranks above one of a better tier; a pin
//     or prefer/avoid never reorders Candidates and a pin never overrides a
//     constraint. Nothing fitting is a Decision with a nil Chosen, not an
//     error.
//   - Evict never chooses an instance in flight, inside min_residency,
//     starting, or not on demand, and leaves no node with more declared
//     memory than its capacity.
//
// # Concurrency
//
// Place and Placer are safe to call concurrently; a Symbols is read under
// its lock while Prepare may intern. Profiles and Decisions are immutable.
//
// The long story (prepared nodes, how a decision is made, cost) is
// docs/internals.md "internal/engine"; the walk-through of an explanation
// is docs/architecture.md section 8.
package engine
