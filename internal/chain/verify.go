package chain

import (
	"bufio"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// VerifyResult describes an intact chain.
type VerifyResult struct {
	// Entries is the number of entries, the genesis included.
	Entries uint64
	// Head is the last entry.
	Head Entry
	// PublicKey is the key that signed the chain, from its genesis.
	PublicKey ed25519.PublicKey
}

// Verify reads a chain from r and checks, entry by entry, its form,
// sequence, links, hashes and signatures. With pub nil the key is taken
// from the genesis; otherwise a genesis naming another key is
// ReasonWrongKey. It streams r and buffers at most MaxEntryBytes of it. A
// broken chain gives a *VerifyError naming the first bad entry; a read
// error from r is returned wrapped as it is.
func Verify(r io.Reader, pub ed25519.PublicKey) (VerifyResult, error) {
	res, _, err := verifyStream(r, pub)
	return res, err
}

// VerifyFile verifies the chain file at path (see Verify).
func VerifyFile(path string, pub ed25519.PublicKey) (VerifyResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return VerifyResult{}, fmt.Errorf("open chain: %w", err)
	}
	defer f.Close()
	res, err := Verify(f, pub)
	if err != nil {
		return res, fmt.Errorf("verify chain %q: %w", path, err)
	}
	return res, nil
}

// verifier holds the state of one pass over a chain.
type verifier struct {
	want  ed25519.PublicKey // expected key, or nil
	key   ed25519.PublicKey // chain key, from the genesis
	index uint64            // index of the next line
	head  Entry             // last good entry
	p     lineParser
}

// verifyStream verifies r and also returns the byte length of the verified
// prefix: on a torn last line, everything before it.
func verifyStream(r io.Reader, pub ed25519.PublicKey) (VerifyResult, int64, error) {
	if pub != nil && len(pub) != ed25519.PublicKeySize {
		return VerifyResult{}, 0, fmt.Errorf("expected public key has %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	v := verifier{want: pub}
	br := bufio.NewReaderSize(r, readBufferBytes)
	var (
		good int64  // bytes of verified lines
		long []byte // a line longer than the bufio buffer, assembled
	)
	for {
		line, err := br.ReadSlice('\n')
		if len(long)+len(line) > MaxEntryBytes {
			return v.result(), good, v.fail(ReasonMalformed, fmt.Errorf("line longer than %d bytes", MaxEntryBytes))
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, line...)
			continue
		}
		if len(long) > 0 {
			long = append(long, line...)
			line = long
		}
		switch {
		case errors.Is(err, io.EOF):
			if len(line) > 0 {
				return v.result(), good, v.fail(ReasonTorn, fmt.Errorf("%d bytes without a newline", len(line)))
			}
			if v.index == 0 {
				return v.result(), good, v.fail(ReasonMalformed, errors.New("empty chain: no genesis"))
			}
			return v.result(), good, nil
		case err != nil:
			return v.result(), good, fmt.Errorf("read chain: %w", err)
		}
		if err := v.check(line[:len(line)-1]); err != nil {
			return v.result(), good, err
		}
		good += int64(len(line))
		long = long[:0]
	}
}

func (v *verifier) result() VerifyResult {
	return VerifyResult{Entries: v.index, Head: v.head, PublicKey: v.key}
}

func (v *verifier) fail(r Reason, err error) *VerifyError {
	return &VerifyError{Index: v.index, Seq: v.index + 1, Reason: r, Err: err}
}

// check verifies one line (without its newline) against the state so far
// and advances it.
func (v *verifier) check(line []byte) error {
	e, err := v.p.parse(line)
	if err != nil {
		return v.fail(ReasonMalformed, err)
	}
	if want := v.index + 1; e.Seq != want {
		return v.fail(ReasonSequenceGap, fmt.Errorf("seq %d, want %d", e.Seq, want))
	}
	key := v.key
	if v.index == 0 {
		if e.Kind != GenesisKind || e.Source != GenesisSource {
			return v.fail(ReasonMalformed, fmt.Errorf("first entry is %s/%s, not the genesis", e.Source, e.Kind))
		}
		if e.Prev != zeroHash {
			return v.fail(ReasonBadLink, errors.New("genesis prev is not zero"))
		}
		if key, err = genesisKey(e.Payload); err != nil {
			return v.fail(ReasonMalformed, err)
		}
	} else {
		if e.Kind == GenesisKind {
			return v.fail(ReasonMalformed, errors.New("genesis after the first entry"))
		}
		if e.Prev != v.head.Hash {
			return v.fail(ReasonBadLink, errors.New("prev is not the hash of the previous entry"))
		}
	}
	sum := hashEntry(&e)
	if hexHash(sum) != e.Hash {
		return v.fail(ReasonBadHash, nil)
	}
	sig, _ := hex.DecodeString(e.Sig) // checked to be hex of the right length by parse
	if !ed25519.Verify(key, sum[:], sig) {
		return v.fail(ReasonBadSignature, nil)
	}
	if v.index == 0 && v.want != nil && !v.want.Equal(key) {
		return v.fail(ReasonWrongKey, fmt.Errorf("genesis key %x, want %x", []byte(key), []byte(v.want)))
	}
	v.key = key
	v.head = e
	v.index++
	return nil
}

// genesisKey extracts the chain key from a genesis payload.
func genesisKey(payload json.RawMessage) (ed25519.PublicKey, error) {
	var g genesisPayload
	if err := json.Unmarshal(payload, &g); err != nil {
		return nil, fmt.Errorf("decode genesis payload: %w", err)
	}
	if !isLowerHex(g.PublicKey, 2*ed25519.PublicKeySize) {
		return nil, errors.New("genesis public_key is not 64 lower-case hex digits")
	}
	k, _ := hex.DecodeString(g.PublicKey)
	return ed25519.PublicKey(k), nil
}
