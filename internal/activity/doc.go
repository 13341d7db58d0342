// Package activity keeps what the fleet page shows of this node's recent
// traffic: a bounded ring of the last requests forwarded through the role
// ports (time, role, route, status, time to first byte, tokens per second
// when the answer reported its usage), and per-second counters of requests
// and completion tokens over the last ChartSeconds seconds for its small
// chart. The proxy feeds it (Log.AddEnded, at the one point where a
// forward ends, with the end it read); internal/fleetui reads it (Recent,
// Rates, Seq).
//
// # Invariants
//
//   - Memory is fixed at New: the ring holds at most its size (at most
//     MaxSize) requests, a full ring overwrites its oldest entry, and the
//     chart keeps ChartSeconds buckets, whatever is added.
//   - Add and AddEnded never block on a reader and never allocate: they
//     copy one fixed-size record under a mutex held for a few field
//     writes; readers copy out under the same mutex and format after
//     releasing it.
//   - Strings added are cut to MaxFieldBytes, so a role or node name
//     cannot grow an entry.
//
// # Concurrency
//
// Log is safe for concurrent use. It starts no goroutine. Time comes from
// the clock given to New (time.Now by default), so tests drive it, or,
// for AddEnded, from its caller, who read the same clock.
package activity
