package chain

import (
	"errors"
	"fmt"
)

var (
	// ErrBroken matches every *VerifyError: the chain is not intact.
	ErrBroken = errors.New("chain broken")
	// ErrClosed is returned by Append after Close.
	ErrClosed = errors.New("chain closed")
	// ErrWriteFailed is returned by Append when its entry could not be
	// written and fsynced, or when the recovery owed by an earlier such
	// failure failed again. The entry is not acknowledged: Head does not
	// show it and a caller that fails closed must not take its action.
	// The chain stays open; a later Append may succeed. Healthy's
	// *NotWritableError matches it too.
	ErrWriteFailed = errors.New("chain write failed")
	// ErrInvalidEntry is returned by Append for an entry it will not write
	// (bad source or kind, reserved kind, payload not a JSON object, or a
	// line longer than MaxEntryBytes). The chain stays usable.
	ErrInvalidEntry = errors.New("invalid chain entry")
)

// Reason says what is wrong with the first bad entry of a chain.
type Reason int

const (
	// ReasonMalformed: the line is not a canonical entry (bad JSON, field
	// order, field format, over-long line, missing or misplaced genesis,
	// empty chain).
	ReasonMalformed Reason = iota + 1
	// ReasonBadHash: the stored hash does not match the entry's fields.
	ReasonBadHash
	// ReasonBadLink: prev is not the hash of the previous entry (or not
	// zeros for the genesis).
	ReasonBadLink
	// ReasonBadSignature: the signature does not verify under the chain key.
	ReasonBadSignature
	// ReasonSequenceGap: seq is not one more than the previous entry's.
	ReasonSequenceGap
	// ReasonWrongKey: the genesis names a key other than the expected one.
	ReasonWrongKey
	// ReasonTorn: the last line has no terminating newline (an append cut
	// short by a crash).
	ReasonTorn
)

var reasonNames = [...]string{
	ReasonMalformed:    "malformed entry",
	ReasonBadHash:      "bad hash",
	ReasonBadLink:      "bad link",
	ReasonBadSignature: "bad signature",
	ReasonSequenceGap:  "sequence gap",
	ReasonWrongKey:     "wrong key",
	ReasonTorn:         "torn last line",
}

// String returns the reason as a short phrase.
func (r Reason) String() string {
	if r > 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// VerifyError names the first bad entry of a chain.
type VerifyError struct {
	// Index is the 0-based line index of the bad entry.
	Index uint64
	// Seq is the sequence number the entry should have (Index+1).
	Seq uint64
	// Reason says what is wrong.
	Reason Reason
	// Err gives detail; it may be nil.
	Err error
}

// Error names the index, the expected seq and the reason.
func (e *VerifyError) Error() string {
	s := fmt.Sprintf("chain entry at index %d (seq %d): %s", e.Index, e.Seq, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the detail error.
func (e *VerifyError) Unwrap() error { return e.Err }

// Is reports whether target is ErrBroken, which every VerifyError matches.
func (e *VerifyError) Is(target error) bool { return target == ErrBroken }
