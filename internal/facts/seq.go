package facts

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// SeqFileName is the file in the data directory that holds the highest
// reserved facts seq.
const SeqFileName = "facts.seq"

// ErrSeqExhausted is returned by Next when no seq is left to hand out.
var ErrSeqExhausted = errors.New("facts seq exhausted")

// SeqStore hands out facts seq values that increase across restarts. It
// durably records a high-water mark before handing out any value at or
// below it, so a crash skips values but never reuses one.
type SeqStore struct {
	path string

	// mu guards last and reserved, and serialises reservations. It is
	// held across the file write on purpose: no value may be handed out
	// before the write that reserves it is durable, and that write is
	// needed once per seqReserveBlock values.
	mu       sync.Mutex
	last     uint64 // last value handed out
	reserved uint64 // highest value durably reserved
}

// OpenSeqStore opens <dataDir>/facts.seq, or starts from zero when it does
// not exist. It writes nothing until the first Next. A file that does not
// hold one decimal number is an error: deleting it restarts seq at 1,
// which peers accept only once the old facts have expired.
func OpenSeqStore(dataDir string) (*SeqStore, error) {
	path := filepath.Join(dataDir, SeqFileName)
	s := &SeqStore{path: path}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open facts seq %q: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSeqFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read facts seq %q: %w", path, err)
	}
	if len(data) > maxSeqFileBytes {
		return nil, fmt.Errorf("facts seq %q is larger than %d bytes", path, maxSeqFileBytes)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("facts seq %q does not hold a number: %w", path, err)
	}
	s.last, s.reserved = v, v
	return s, nil
}

// Path returns the file the store persists to.
func (s *SeqStore) Path() string { return s.path }

// Next returns the next seq, greater than every value this store or an
// earlier one on the same file has handed out.
func (s *SeqStore) Next() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == math.MaxUint64 {
		return 0, ErrSeqExhausted
	}
	if s.last == s.reserved {
		hi := s.reserved + seqReserveBlock
		if hi < s.reserved {
			hi = math.MaxUint64
		}
		if err := writeSeqFile(s.path, hi); err != nil {
			return 0, err
		}
		s.reserved = hi
	}
	s.last++
	return s.last, nil
}

// writeSeqFile replaces path with v: temp file, fsync, rename, directory
// fsync, mode 0600.
func writeSeqFile(path string, v uint64) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, SeqFileName+".tmp-*")
	if err != nil {
		return fmt.Errorf("reserve facts seq: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("reserve facts seq: %w", err)
	}
	if _, err := tmp.WriteString(strconv.FormatUint(v, 10) + "\n"); err != nil {
		return fmt.Errorf("reserve facts seq: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("reserve facts seq: fsync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("reserve facts seq: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		done = true
		return fmt.Errorf("reserve facts seq: %w", err)
	}
	done = true
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("reserve facts seq: open dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("reserve facts seq: fsync dir: %w", err)
	}
	return nil
}
