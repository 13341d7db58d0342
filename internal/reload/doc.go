// Package reload is the one shape of a config reload: every reloadable
// component offers Prepare(next) returning a Prepared (or an error, which
// changes nothing), and the daemon applies a reload as one list of Steps
// (All): every step is prepared first; if any refuses, the prepared ones
// are aborted and nothing changes; otherwise all commit, in list order.
//
// # Invariants
//
// Prepare changes nothing a running component shows; what it holds (a
// listener bound early, a lock) is released by exactly one of Commit and
// Abort. Commit cannot fail. A component allows one reload between
// Prepare and Commit or Abort at a time.
//
// # Concurrency
//
// The package has no state and starts no goroutines. It imports only the
// standard library.
package reload
