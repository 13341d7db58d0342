// Package heapgoal keeps the garbage collector's heap goal at least a
// fixed headroom above the live heap. Go's rule alone (GOGC=100: collect
// when the heap has doubled since the last collection, at least 4 MB)
// collects a node's small live heap (a few MB) ten times a second under
// load, and each cycle costs its mark work, its write barriers and its
// stop-the-world pauses. Keep sets the GC percent after each collection
// so that the next one comes headroom bytes later at least; a large live
// heap keeps the configured percent, so the headroom only matters while
// the heap is small.
//
// # Invariants
//
//   - The percent Keep sets is never below the base it was given and
//     never above MaxPercent.
//   - After stop returns, the percent is base again and Keep sets it no
//     more.
//
// # Concurrency
//
// Keep's tuning runs on the runtime's cleanup goroutine, once per
// collection. Keep and its stop functions are safe for concurrent use;
// the GC percent being process-wide, concurrent callers share one tuner.
package heapgoal
