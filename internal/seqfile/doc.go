// Package seqfile is a persistent sequence counter: a Counter hands out
// uint64 values that increase across restarts, for the seq numbers of
// signed facts and of signed revocation notices, which peers accept only
// when they grow.
//
// # Invariants
//
// The file holds one decimal number and a newline, the highest value
// durably reserved, written with atomicfile (mode 0600). A value is handed
// out only after the write that covers it is durable, so a crash may skip
// values but never reuses one. A missing file starts the count at zero;
// deleting it therefore restarts the sequence, which is why callers that
// can lose the file use NextAtLeast with a clock as the floor.
//
// # Concurrency
//
// A Counter is safe for concurrent use; it serialises reservations and
// holds its mutex across the file write on purpose (see Counter). One
// Counter per file and per process: two writers of one file would hand
// out the same values. It starts no goroutines.
package seqfile
