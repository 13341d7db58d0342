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
// provenance order, states, predicate operators, attribute names) and
// attribute values (grammar.Value) it uses rather than redefines.
//
// # Prepared nodes
//
// What changes only with a node's facts (its capability records and free
// memory) can be prepared once and kept by the caller between decisions:
// Symbols.Prepare interns the records' ids, attribute names and string
// values as small integers in a Symbols the caller keeps, reduces
// provenance, state and values to integers and works out the node's load
// and memory pools, and returns an immutable Profile, given to Place as
// Node.Profile. The controller keeps one per node and prepares it again
// only when the node's records change. Nodes given without a Profile are
// prepared by Place itself, with a Symbols of its own, for every
// decision.
//
// Compact copies a node set's Profiles so that they lie one after the
// other in memory, in the order of the nodes, which a decision reads
// faster; a Placer decides as Place, keeping its working memory and the
// order of the node ids between decisions. Neither changes a decision.
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
//     no package-level mutable state, no dependence on map iteration, on
//     the order of nodes (each node is evaluated on its own, and the
//     output is ordered by tier, score and node id alone) or on what a
//     Symbols interned before (symbols only name strings). The same input
//     gives the same Decision. Place never modifies its arguments (it
//     reads a Symbols under its lock, and Prepare may intern meanwhile);
//     it is safe to call concurrently. A Decision shares no memory with
//     them but strings, Values and Profiles, which never change.
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
// on, on 32-bit keys. The request is compiled once per call against the
// symbols: each symbol gets the chain of selectors that select an id
// with that symbol (its own, then its dot-prefix's, and so on), so a
// node's scan reads one small integer per capability and looks its chain
// up, in a loop that calls nothing; the capabilities a chain selects are
// then matched (provenance, predicates and state as integers, attributes
// found by symbol). Work only some nodes need waits until they need it:
// the later variants' selections (a node that does not fit the first),
// the accelerator capacity (an eligible node). A route whose
// requirements select no common capability id is not matched jointly:
// each requirement takes what it would alone. Per-node scratch is reused
// and written without storing pointers (but for a rejected node's
// rejections and an eligible node's assignment block). A decision
// allocates little per node: a Candidate of 128 bytes, 32 per rejection
// (a rejection names its node's texts and figures by index in the
// decision's side tables), an assignment of a few integers, and a few
// integers of sort keys. Rejection.Detail and Candidate.Assigned make
// their text and lists on demand, from figures and indices Place
// records, and Decision.Explain formats the explanation on demand: none
// of it is part of Place's cost. BENCHMARKS.md has the figures.
package engine
