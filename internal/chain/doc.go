// Package chain is nodeld's append-only, hash-chained, signed audit log.
//
// # Format
//
// A chain is a file of JSON lines, one entry per line, each line ending in
// '\n'. Every line has exactly this shape and field order (no whitespace
// outside the payload, no other fields):
//
//	{"seq":N,"time":"...","source":"...","kind":"...","payload":{...},"prev":"<64 hex>","hash":"<64 hex>","sig":"<128 hex>"}
//
// The fields:
//
//   - seq starts at 1 (the genesis entry) and grows by exactly one per line,
//     so seq always equals the 1-based line number and the entry count.
//   - time is the append time, RFC 3339 with nanoseconds, in UTC ("Z").
//   - source names the component that appended (e.g. "nodeld", "table");
//     kind names the event (e.g. "node.start"). Both are short identifiers
//     (see validIdent); kinds starting with "chain." are reserved.
//   - payload is a compact JSON object.
//   - prev is the hash of the previous entry; 64 zeros for the genesis.
//   - hash is the lower-case hex SHA-256 of the canonical encoding of seq,
//     time, source, kind, payload and prev (see hashEntry): a domain tag,
//     seq as 8 big-endian bytes, then each other field as a 4-byte
//     big-endian length and its bytes exactly as stored in the line. The
//     hash never depends on re-marshalling: time is the written string and
//     payload the raw bytes of the line.
//   - sig is the lower-case hex ed25519 signature by the node key over the
//     32 hash bytes.
//
// The first entry is the genesis (source "chain", kind "chain.genesis")
// whose payload names the signing key ({"public_key":"<64 hex>"}), so a
// file can be verified without being told the key; a verifier that is told
// the key reports a different genesis key as ReasonWrongKey. Rotating the
// node key therefore needs a new chain (Archive, then Open).
//
// # Invariants
//
//   - An entry is acknowledged (Append returns it) only after its whole line
//     has been written and fsynced; Head and Entries only ever show
//     acknowledged entries.
//   - The chain keeps the byte offset just after the last acknowledged
//     line. After a write or sync error, under the append lock and before
//     the failed Append returns, it closes the descriptor that failed
//     (never syncing it again: after EIO from fsync the kernel may have
//     dropped the dirty pages), opens the file again, checks that it is
//     the same file and at least that long, truncates it to that offset
//     and fsyncs the truncation. The failed Append returns ErrWriteFailed:
//     its entry is not acknowledged, and the next entry takes its seq and
//     prev, so the file never holds a torn tail or a duplicate after a
//     successful recovery. If the recovery fails, appends keep failing
//     closed with ErrWriteFailed, each first retrying the recovery once
//     (one attempt per Append, no retry loop), and nothing is written
//     until a recovery succeeds. Healthy reports the state from the first
//     failure until an Append succeeds again.
//   - An entry whose append failed can still be on disk after a crash
//     (the process stopped before its truncation reached the disk): it is
//     then a torn tail that Open cuts, or a complete entry that records an
//     attempt whose caller was told it failed and did not act.
//   - Open refuses a file with any break other than a torn last line
//     (*VerifyError, errors.Is(err, ErrBroken)); the operator's way out is
//     Archive, which moves the file aside so Open starts a fresh chain.
//   - A torn last line is cut only after a byte-for-byte copy of the whole
//     original file has been written and fsynced next to it.
//   - Reading is bounded: no line may exceed MaxEntryBytes, and Verify
//     streams its input.
//
// # Remotely triggered records
//
// Records that a remote party can trigger (refused advertisements, ctl
// calls, handshakes, notices, inference requests) go through one shared
// Recorder, so that a flood grows the chain by a bounded number of
// entries and costs the append lock (and the disk) no more than that, and
// an honest repeat (a peer refused every 20 s, forever) grows it ever more
// slowly. Each RecordKey {Class, Sender, Kind, Reason} has a period, aligned to
// multiples of the window (default one minute): the first PerKey events
// of the period are chained as given and the rest counted; after the
// period closes one summary entry, of kind Kind+".suppressed", records the
// count. A key that has events period after period backs off: periods of
// one window, one window, then twice as long each time up to MaxPeriod
// (default one hour); a period without events forgets the key. Keys are
// tracked per class (RecordClass): ClassPeer for senders the
// configuration bounds (admitted peers, configured addresses; MaxKeys,
// default 256), ClassSource for senders anyone can pick (the remote
// address of a refused handshake; MaxSourceKeys, default 64) and
// ClassSecurity for the evidence of an attack (a key that differs from
// the pinned one, an untrusted signer, a bad signature; MaxSecurityKeys,
// default 64). The caller classifies. Once a class's keys are taken, the
// events of its further keys are only counted, into one OverflowKind
// summary of the class per window that names the class and counts them
// by kind and reason (at most MaxOverflowReasons pairs); the first such
// event of a window and the summary are logged. A flood of one class
// never takes the keys of another. The bound: the events of one window,
// however many, make at most K*(PerKey+1)+3 chain entries, K the sum of
// the three budgets (771 with the defaults), and the recorder appends no
// more than that in any one window; it holds at most K keys of at most
// MaxRecordKeyBytes per field. The steady growth of a key that repeats
// forever is PerKey+1 entries per MaxPeriod once backed off (two an hour
// with the defaults). Every event is accounted for: chained, counted in
// exactly one summary, or (if an Append fails) reported to the caller or
// logged.
//
// # Concurrency
//
// A *Chain is safe for concurrent use. Appends are serialised: appendMu is
// held across one append's write and fsync, and its recovery if it needs
// one (that is the point of an ordered log); Head, Entries and Healthy
// read state under a separate mutex that is never held across I/O, so
// they never wait for a disk. Each append pays one fsync; group commit was
// not needed (see the benchmarks in bench_test.go).
//
// A *Recorder is safe for concurrent use. Its mutex guards only its
// counts and is never held across Append: it collects what to append
// under the lock and appends outside it, so it never holds up another
// caller of the chain, and a suppressed event never waits for a disk.
// Summaries of a period are appended by whichever Record, Flush or Run
// tick first sees the period closed, so they may interleave with entries
// of the next one; each names its period.
//
// The package starts no goroutines: Recorder.Run runs its ticker loop in
// the caller's goroutine and returns nil once its context is done. It
// imports no other nodeld package.
package chain
