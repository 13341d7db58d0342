// Package chain is nodeld's append-only, hash-chained, signed audit log: a
// file of JSON lines, one entry per line, each carrying the hash of the
// one before and the node key's signature over its own hash, opened by a
// genesis entry that names the key. It also holds the Recorder, which
// bounds what remote parties can make the chain record, and OpenNode, the
// daemon's open that chains its own recovery (a torn tail cut, a broken
// chain archived on reset).
//
// # Invariants
//
//   - An entry is acknowledged (Append returns it) only after its whole
//     line is written and fsynced; Head and Entries show acknowledged
//     entries only. After a write or sync error the file is truncated back
//     to the last acknowledged line before the failed Append returns
//     ErrWriteFailed, so it never holds a torn tail or a duplicate; until
//     a recovery succeeds every append fails closed.
//   - The hash never depends on re-marshalling: it covers the fields
//     exactly as stored in the line.
//   - Open refuses a file with any break other than a torn last line, which
//     it cuts only after a full copy of the file is fsynced beside it.
//     Reading is bounded by MaxEntryBytes.
//   - Records a remote party can trigger go through one Recorder: in any
//     window they make at most a fixed number of entries (771 with the
//     defaults), and every event is chained, counted in a summary, or
//     reported.
//
// # Concurrency
//
// A *Chain is safe for concurrent use. appendMu serialises appends across
// their write, fsync and recovery; Head, Entries and Healthy read under a
// separate mutex never held across I/O. A *Recorder is safe for concurrent
// use; its mutex guards its counts only and is never held across Append.
// The package starts no goroutine: Recorder.Run runs its ticker in the
// caller's goroutine. It imports no other nodeld package.
//
// The long story (the line format, recovery, remotely triggered records and
// their bound) is docs/internals.md "internal/chain".
package chain
