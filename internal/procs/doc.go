// Package procs adapts the number of threads that run Go code at once
// (GOMAXPROCS) to the process's load: one while the work fits one core
// with room to spare, twice as many each time the ones in use are busy,
// and half as many again once the load has been low for a while, never
// more than the runtime's default (the host's or cgroup's CPUs).
//
// A node mostly relays requests. At low concurrency a single thread
// serves them with less latency and CPU than several: with more than one,
// the runtime wakes idle threads to look for work, which find none and
// sleep again, and each request's wake-ups land on whichever thread and
// core (measured on the mesh hop: BENCHMARKS.md, "One thread until the
// load needs more"). Under load the threads come back within an interval.
//
// # Invariants
//
//   - The count set is always within [1, Max].
//   - A raise follows one interval whose CPU use reached RaiseAt of the
//     count; a lowering follows QuietIntervals in a row under LowerAt of
//     the count.
//   - After stop returns, the count is Max again and Adapt sets it no
//     more.
//
// # Concurrency
//
// Adapt starts one goroutine, which stop ends and waits for. The count is
// process-wide: Adapt is meant to be called once, by the daemon's main.
package procs
