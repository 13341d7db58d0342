// Package mux carries many streams over one connection (tlspool's shared
// TLS 1.3 connections, which carry a peer's inference exchanges past the
// first in flight): 8-byte frame headers (id, type DATA, WINDOW or
// RESET, flags, length), per-stream flow control, and ends by FIN, RESET
// or End (no frame: the protocol above knows the exchange is over).
//
// # Invariants
//
//   - A client opens odd ids, given in order on each stream's first frame;
//     a server takes the next id as a new stream, refuses one past
//     MaxStreams with RESET(refused), and fails the session on any other
//     new id, as on every protocol error (ErrProtocol, with the reason).
//   - A stream holds at most Window bytes unread (more from the peer is a
//     protocol error); its buffer shrinks to at most 4 KiB when drained.
//     So a peer can make a session hold about MaxStreams x Window bytes
//     received, plus 2 x WriteQueue queued to send; nothing else grows.
//   - Peer input never panics; a read deadline never fails the session.
//
// # Concurrency
//
// A Session starts no goroutine. Reads: a session has one read token; a
// goroutine that needs a frame (a Read with nothing buffered, Accept, a
// Write waiting for window) takes it if free and reads the connection
// itself, dispatching frames to their streams and waking their waiters,
// until its own need is met and no whole frame is left buffered; then it
// gives the token back, which wakes one waiter to take it (Session.wait
// has the lost-wake-up argument). At one stream in flight its own Read
// reads its answer: no hand-off between goroutines. A server is served
// best by goroutines that loop Accept then handle, starting another only
// before a handler blocks elsewhere: each idle Accept is a waiter that a
// released token wakes. Writes: a Write
// queues frames; if no flush is in progress it yields the processor once
// (the goroutines ready to write queue theirs meanwhile), writes the
// whole queue in one conn.Write and loops while others queued (coalescing),
// handing the flush on after its own bytes and a few rounds. Write
// returns once its bytes are queued; a later write error fails the
// session. A deadline that expires during a conn.Write fails the session.
package mux
