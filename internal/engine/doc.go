// Package engine is the placement engine: a pure function, Place, that
// decides on which node a workload goes and explains every choice and
// every rejection (shared/reference/ctl-original.md 3.6).
//
// The controller (internal/plane) converts what it knows into the
// engine's own input types: a Request (the workload: kind and name, common
// requirements, variants with their own requirements, memory demand and
// execution, labels and excludes, revocable refs, trust floor, provenance
// floor, emulation opt-in, preferences, perf target, stickiness, pin,
// prefer, avoid), one Node per node (operator trust tier, liveness, facts
// expiry, capability records, free memory, instances, pending
// reservations, the governance gate's verdict), the Cluster (revoked
// nodes and refs) and Weights. The engine imports no internal package but
// internal/grammar, whose capability vocabulary (ids, selectors,
// provenance order, states, predicate operators, attribute names) it
// uses rather than redefines.
//
// # How a decision is made
//
// Phase A rejects every node that fails a hard constraint and records
// every failing constraint with a stable Code: node_revoked, liveness,
// facts_expired, trust, workload_revoked, co_residency, then route
// selection (requirements, provenance, memory, emulation_not_allowed),
// gate and perf_budget. Route selection matches the common requirements
// and each variant's jointly (an exclusive capability serves one
// requirement; the search is bounded by MaxJointSteps) and checks the
// variant's memory demand, plus the node's pending reservations, against
// its pools; the first native variant that fits is the route, else the
// first emulated one when the request allows emulation.
//
// Phase B scores the survivors (execution by tier, locality, accel_fit,
// perf, load, stickiness; DefaultWeights). Candidates rank by tier first
// (native > emulated > dev_fallback: no score lifts a lower tier over a
// higher one), then total score, then node id. A pin overrides scores and
// tiers but never a constraint; prefer and avoid choose within the best
// tier only.
//
// # Invariants
//
//   - Pure: no clock, no I/O, no logger, no goroutines, no randomness,
//     no package-level mutable state, no dependence on map iteration or
//     on the order of nodes (each node is evaluated on its own, and the
//     output is ordered by tier, score and node id alone). The same input
//     gives the same Decision. Place never modifies its arguments; it is
//     safe to call concurrently.
//   - Every node given to Place appears in Decision.Candidates, with its
//     score breakdown or every constraint it fails.
//   - The chosen node passes every constraint; its route's memory demand
//     plus its pending reservations fits every pool it draws on.
//   - An eligible candidate never ranks above one of a better tier; a pin
//     or prefer/avoid choice does not reorder Candidates.
//   - Errors are only: an invalid request or weights, bad or repeated
//     node ids, an unknown pin, an ineligible pin. Nothing fitting is a
//     Decision with a nil Chosen.
//
// # Cost
//
// Work is linear in nodes × capabilities, plus a sort of the node ids and
// one of the eligible candidates, both by radix (linear) from 256 nodes
// on, on integer keys. The request is compiled once
// per call: selectors bucketed by the first byte of the ids they can
// select, shortest first; predicate operators and numeric operands
// compiled; rejection texts memoised per requirement. A node's
// capabilities are scanned once: a loop that calls nothing notes which
// selectors may select each (first byte, length, last byte, boundary),
// then the candidates are confirmed and matched. Work only some nodes
// need waits until they need it: the other variants' candidates (a node
// that does not fit the first), whether the node has an accelerator and
// its load (an eligible node), the text of a failure (a rejected node).
// Per-node scratch is reused and written without storing pointers (but
// for a rejected node's rejections), so that evaluating a node costs few
// write barriers; the Decision's slices are carved from a few chunks
// sized from what the nodes so far took. Decision.Explain
// formats text on demand; its cost is not part of Place's.
// BENCHMARKS.md has the figures, and why issue 9's time targets are
// missed.
package engine
