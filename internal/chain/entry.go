package chain

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

const (
	// GenesisKind is the kind of the first entry of every chain.
	GenesisKind = "chain.genesis"
	// GenesisSource is the source of the genesis entry.
	GenesisSource = "chain"

	// reservedKindPrefix marks kinds only this package may write.
	reservedKindPrefix = "chain."

	// hashDomain separates chain entry hashes from any other SHA-256 use.
	hashDomain = "nodeld.chain.entry.v1\x00"

	hashHexLen = 2 * sha256.Size
	sigHexLen  = 128
)

// zeroHash is the prev of the genesis entry.
var zeroHash = string(bytes.Repeat([]byte{'0'}, hashHexLen))

// Entry is one record of the chain, with its fields exactly as stored.
type Entry struct {
	// Seq is the 1-based position of the entry; the genesis is 1.
	Seq uint64 `json:"seq"`
	// Time is the append time as written (RFC 3339, nanoseconds, UTC).
	Time string `json:"time"`
	// Source names the component that appended the entry.
	Source string `json:"source"`
	// Kind names the event.
	Kind string `json:"kind"`
	// Payload is the compact JSON object of the event, as stored.
	Payload json.RawMessage `json:"payload"`
	// Prev is the hex hash of the previous entry (64 zeros for the genesis).
	Prev string `json:"prev"`
	// Hash is the hex SHA-256 over the canonical encoding of the fields
	// above (see the package doc).
	Hash string `json:"hash"`
	// Sig is the hex ed25519 signature by the chain key over the hash bytes.
	Sig string `json:"sig"`
}

// genesisPayload is the payload of the genesis entry.
type genesisPayload struct {
	PublicKey string `json:"public_key"`
}

// hashEntry computes the entry hash from the stored fields. Each variable
// field is length-prefixed, so no two field tuples share an encoding.
func hashEntry(e *Entry) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	h.Write([]byte(hashDomain))
	binary.BigEndian.PutUint64(n[:], e.Seq)
	h.Write(n[:])
	for _, f := range [][]byte{[]byte(e.Time), []byte(e.Source), []byte(e.Kind), e.Payload, []byte(e.Prev)} {
		binary.BigEndian.PutUint32(n[:4], uint32(len(f)))
		h.Write(n[:4])
		h.Write(f)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// appendLine appends the canonical line of e, '\n' included, to dst. It
// assumes the string fields need no JSON escaping, which Append guarantees
// (validIdent, hex, formatted time) and parseLine checks by comparing a
// parsed line with its rendering.
func appendLine(dst []byte, e *Entry) []byte {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, e.Seq, 10)
	dst = append(dst, `,"time":"`...)
	dst = append(dst, e.Time...)
	dst = append(dst, `","source":"`...)
	dst = append(dst, e.Source...)
	dst = append(dst, `","kind":"`...)
	dst = append(dst, e.Kind...)
	dst = append(dst, `","payload":`...)
	dst = append(dst, e.Payload...)
	dst = append(dst, `,"prev":"`...)
	dst = append(dst, e.Prev...)
	dst = append(dst, `","hash":"`...)
	dst = append(dst, e.Hash...)
	dst = append(dst, `","sig":"`...)
	dst = append(dst, e.Sig...)
	dst = append(dst, "\"}\n"...)
	return dst
}

// validIdent reports whether s may be a source or kind: 1 to MaxIdentBytes
// of ASCII letters, digits and . _ - : / (nothing that JSON would escape).
func validIdent(s string) bool {
	if len(s) == 0 || len(s) > MaxIdentBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '-', c == ':', c == '/':
		default:
			return false
		}
	}
	return true
}

// isLowerHex reports whether s is exactly n lower-case hex digits.
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// formatTime renders an append time as stored.
func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// errNotCanonical says a line parsed but is not in the one form this
// package writes (field order, spacing, escapes, duplicate or extra keys).
var errNotCanonical = errors.New("line is not in canonical form")

// lineParser decodes lines, reusing its buffers between lines.
type lineParser struct {
	compact bytes.Buffer // payload compaction
	render  []byte       // canonical rendering of the parsed line
}

// parse decodes one line (without its '\n') and checks that it is in
// canonical form, so that what is verified is exactly what any reader of
// the line sees. It does not check hashes, links or signatures.
func (p *lineParser) parse(line []byte) (Entry, error) {
	var e Entry
	if len(line) == 0 || line[0] != '{' {
		return e, errors.New("line is not a JSON object")
	}
	if err := json.Unmarshal(line, &e); err != nil {
		return e, fmt.Errorf("decode line: %w", err)
	}
	if !validIdent(e.Source) || !validIdent(e.Kind) {
		return e, errors.New("invalid source or kind")
	}
	if !isLowerHex(e.Prev, hashHexLen) || !isLowerHex(e.Hash, hashHexLen) || !isLowerHex(e.Sig, sigHexLen) {
		return e, errors.New("prev, hash or sig is not lower-case hex of the right length")
	}
	if len(e.Payload) == 0 || e.Payload[0] != '{' {
		return e, errors.New("payload is not a JSON object")
	}
	if t, err := time.Parse(time.RFC3339Nano, e.Time); err != nil || formatTime(t) != e.Time {
		return e, errors.New("time is not RFC 3339 UTC as the chain writes it")
	}
	p.compact.Reset()
	if err := json.Compact(&p.compact, e.Payload); err != nil || !bytes.Equal(p.compact.Bytes(), e.Payload) {
		return e, errors.New("payload is not compact JSON")
	}
	p.render = appendLine(p.render[:0], &e)
	if !bytes.Equal(p.render[:len(p.render)-1], line) {
		return e, errNotCanonical
	}
	return e, nil
}

// hexHash renders a hash as stored.
func hexHash(sum [sha256.Size]byte) string { return hex.EncodeToString(sum[:]) }
