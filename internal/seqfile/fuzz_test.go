package seqfile

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzOpen: a counter file is read back at every start and may have been
// damaged or written by someone else. Open never panics; what it refuses
// it leaves as it was (Open writes nothing); what it accepts is one
// decimal number, and the counter then continues above it, persisting a
// value that opens again to at least the one handed out.
func FuzzOpen(f *testing.F) {
	f.Add([]byte("0\n"), uint8(1))
	f.Add([]byte("41"), uint8(64))
	f.Add([]byte(" 7 \n"), uint8(2))
	f.Add([]byte(strconv.FormatUint(math.MaxUint64, 10)+"\n"), uint8(1))
	f.Add([]byte(strconv.FormatUint(math.MaxUint64-1, 10)), uint8(200))
	f.Add([]byte("18446744073709551616"), uint8(1))
	f.Add([]byte("-1"), uint8(1))
	f.Add([]byte("+5"), uint8(1))
	f.Add([]byte("1\n2\n"), uint8(1))
	f.Add([]byte(""), uint8(1))
	f.Add([]byte(strings.Repeat("0", 70)+"1"), uint8(1))
	dir := f.TempDir()
	path := filepath.Join(dir, "x.seq")
	f.Fuzz(func(t *testing.T, data []byte, block uint8) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Open(path, uint64(block))
		if err != nil {
			if got, rerr := os.ReadFile(path); rerr != nil || !bytes.Equal(got, data) {
				t.Fatalf("refused file changed: %q, %v", got, rerr)
			}
			return
		}
		if block == 0 {
			t.Fatal("block 0 accepted")
		}
		was, perr := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if perr != nil {
			t.Fatalf("accepted %q, not a number: %v", data, perr)
		}
		v, err := c.Next()
		if was == math.MaxUint64 {
			if err == nil {
				t.Fatalf("Next after the last value = %d", v)
			}
			return
		}
		if err != nil || v != was+1 {
			t.Fatalf("Next after %d = %d, %v", was, v, err)
		}
		again, err := Open(path, uint64(block))
		if err != nil {
			t.Fatalf("reopen after Next: %v", err)
		}
		if w, err := again.Next(); err == nil && w <= v {
			t.Fatalf("reopened counter hands out %d after %d", w, v)
		}
	})
}
