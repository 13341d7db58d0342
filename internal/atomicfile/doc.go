// Package atomicfile replaces a file so that after a crash it holds either
// its old content or the new one, never a mix or nothing: the data is
// written to a temporary file in the same directory, fsynced, given its
// mode, renamed over the target, and the directory is fsynced.
// ReadBounded is the read side: a regular file within its size bound.
//
// # Invariants
//
// The temporary file is named TempPrefix(path) followed by a random
// suffix, is removed on every error before the rename, and is never left
// behind by a successful call.
//
// # Concurrency
//
// It is a leaf: standard library only, no state, no goroutines. Calls on
// different paths are independent; callers serialise writes to one path
// themselves (the last rename wins).
package atomicfile
