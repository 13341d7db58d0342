package chain

const (
	// MaxEntryBytes bounds one line of a chain file, its '\n' included.
	// Append refuses a larger entry and Verify reports a longer line as
	// malformed without buffering more than this.
	MaxEntryBytes = 1 << 20

	// MaxIdentBytes bounds the source and kind of an entry.
	MaxIdentBytes = 128

	// MaxRecordKeyBytes bounds the Sender and the Reason of a RecordKey,
	// so the keys a Recorder tracks take bounded memory (the sum of its
	// class budgets).
	MaxRecordKeyBytes = 256

	// MaxOverflowReasons bounds the pairs of kind and reason an overflow
	// summary counts apart (SuppressedEvent.Reasons); the events of
	// further pairs are in its total only. Kinds and reasons come from
	// fixed sets in the callers' code, so this is never reached in
	// practice; it keeps the summary's size bounded if one is not.
	MaxOverflowReasons = 32

	// readBufferBytes is the bufio buffer Verify reads through; lines longer
	// than this are assembled in a separate buffer bounded by MaxEntryBytes.
	readBufferBytes = 64 << 10
)
