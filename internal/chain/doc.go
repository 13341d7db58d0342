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
//   - After any write or sync error the chain fails closed: every later
//     Append returns ErrFailed until the file is reopened with Open, which
//     re-verifies it (a partly written line is then a torn tail).
//   - Open refuses a file with any break other than a torn last line
//     (*VerifyError, errors.Is(err, ErrBroken)); the operator's way out is
//     Archive, which moves the file aside so Open starts a fresh chain.
//   - A torn last line is cut only after a byte-for-byte copy of the whole
//     original file has been written and fsynced next to it.
//   - Reading is bounded: no line may exceed MaxEntryBytes, and Verify
//     streams its input.
//
// # Concurrency
//
// A *Chain is safe for concurrent use. Appends are serialised: appendMu is
// held across one append's write and fsync (that is the point of an ordered
// log); Head and Entries read state under a separate mutex that is never
// held across I/O, so they never wait for a disk. Each append pays one
// fsync; group commit was not needed (see the benchmarks in bench_test.go).
//
// The package starts no goroutines and imports no other nodeld package.
package chain
