// Package holdq holds requests waiting for a route: per key (a role), a
// bounded FIFO queue of waiters that a dispatcher releases, in arrival
// order, once a Watcher (the placement table) has changed past each
// waiter's mark and the key is ready (resolves); Depth says how many a
// key's queue holds. It also keeps which keys
// were lately ready (Recent), the backoff of a released waiter that found
// no free slot (Backoff) and the SSE side of a held stream (Stream,
// WantsStream). The proxy decides what to hold and answers; this package
// only waits.
//
// # Invariants
//
//   - A waiter is released at most once, and only after the watcher's
//     generation passed the mark it joined with, so a waiter never spins
//     on a table that did not change.
//   - Waiters of a key are released in arrival order, each after the one
//     before it called Ticket.Done (it resolved again).
//   - A waiter leaves its queue at once when its context ends, its
//     deadline passes or the Queues stop; the depth gauge follows.
//
// # Concurrency
//
// Queues is safe for concurrent use. One dispatcher goroutine runs per key
// while its queue is not empty; Stop ends them and waits for them. No
// lock is held while the watcher or the ready function is called.
package holdq
