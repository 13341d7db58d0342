package chain

const (
	// MaxEntryBytes bounds one line of a chain file, its '\n' included.
	// Append refuses a larger entry and Verify reports a longer line as
	// malformed without buffering more than this.
	MaxEntryBytes = 1 << 20

	// MaxIdentBytes bounds the source and kind of an entry.
	MaxIdentBytes = 128

	// MaxRecordKeyBytes bounds the Sender and the Reason of a RecordKey,
	// so the keys a Recorder tracks take bounded memory (MaxKeys of them).
	MaxRecordKeyBytes = 256

	// readBufferBytes is the bufio buffer Verify reads through; lines longer
	// than this are assembled in a separate buffer bounded by MaxEntryBytes.
	readBufferBytes = 64 << 10
)
