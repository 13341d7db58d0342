package seqfile

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/nodeld/nodeld/internal/atomicfile"
)

// maxFileBytes bounds the counter file read: a uint64 in decimal and a
// newline fit many times over.
const maxFileBytes = 64

// ErrExhausted is returned by Next when no value is left to hand out.
var ErrExhausted = errors.New("sequence exhausted")

// Counter hands out increasing values backed by a file.
type Counter struct {
	path  string
	block uint64

	// mu guards last and reserved, and serialises reservations. It is
	// held across the file write: no value may be handed out before the
	// write that reserves it is durable, and that write happens once per
	// block values.
	mu       sync.Mutex
	last     uint64 // last value handed out
	reserved uint64 // highest value durably reserved
}

// Open reads the counter at path, or starts from zero when the file does
// not exist; it writes nothing. block, at least 1, is how many values one
// durable write reserves: 1 writes before every value, a larger block
// writes less often and may skip up to block-1 values after a crash. A
// file that does not hold one decimal number is an error, not a restart.
func Open(path string, block uint64) (*Counter, error) {
	if block == 0 {
		return nil, fmt.Errorf("sequence %q: block must be at least 1", path)
	}
	c := &Counter{path: path, block: block}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open sequence %q: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read sequence %q: %w", path, err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("sequence %q is larger than %d bytes", path, maxFileBytes)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("sequence %q does not hold a number: %w", path, err)
	}
	c.last, c.reserved = v, v
	return c, nil
}

// Path returns the file the counter persists to.
func (c *Counter) Path() string { return c.path }

// Next returns a value greater than every value handed out before from
// this file, by this Counter or an earlier one.
func (c *Counter) Next() (uint64, error) { return c.NextAtLeast(0) }

// NextAtLeast is Next, but never returns less than floor. A clock in
// milliseconds as the floor keeps a sequence growing when its file is
// lost.
func (c *Counter) NextAtLeast(floor uint64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == math.MaxUint64 {
		return 0, ErrExhausted
	}
	v := max(c.last+1, floor)
	if v > c.reserved {
		hi := v + (c.block - 1)
		if hi < v {
			hi = math.MaxUint64
		}
		if err := atomicfile.WriteFile(c.path, []byte(strconv.FormatUint(hi, 10)+"\n"), 0o600); err != nil {
			return 0, fmt.Errorf("reserve sequence: %w", err)
		}
		c.reserved = hi
	}
	c.last = v
	return v, nil
}
