package mux

// The bounds of Config and of the frames on the wire. Every one is checked
// while decoding, before anything is allocated for a frame.
const (
	// headerLen is the size of a frame's header: stream id (4), type (1),
	// flags (1), payload length (2).
	headerLen = 8

	// controlLen is the payload length of WINDOW and RESET: one u32.
	controlLen = 4

	defaultMaxStreams = 256
	maxMaxStreams     = 4096

	defaultWindow = 256 << 10
	minWindow     = 16 << 10
	maxWindow     = 16 << 20

	// defaultMaxFrame lets a whole frame fill one TLS record (16 KiB of
	// plaintext) with its header.
	defaultMaxFrame = 16<<10 - headerLen
	minMaxFrame     = 1 << 10
	maxMaxFrame     = 1<<16 - 1

	defaultWriteQueue = 1 << 20

	// maxSendWindow bounds a stream's send window: WINDOW increments that
	// add up past it are a protocol error (no honest peer grants more than
	// its Window, at most 16 MiB).
	maxSendWindow = 1<<31 - 1

	// maxStreamID is the greatest id a client may use; past it a session
	// opens no more streams.
	maxStreamID = 1<<32 - 1

	// keepRecvBuf is the capacity a drained stream buffer keeps; a larger
	// one is dropped, so idle streams hold at most this much.
	keepRecvBuf = 4 << 10

	// maxFreeBufs bounds the receive buffers a session keeps for new
	// streams (at most maxFreeBufs x keepRecvBuf bytes).
	maxFreeBufs = 64

	// keepWriteBuf is the capacity the session's write buffers keep once
	// drained.
	keepWriteBuf = 64 << 10

	// maxFlushRounds is how many writes a flusher makes for others once
	// its own bytes are out before it hands the flush to the next writer
	// that queues.
	maxFlushRounds = 4
)
