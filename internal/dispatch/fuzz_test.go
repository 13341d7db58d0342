package dispatch

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzReadLine: operator request lines come from local clients; the
// reader never returns more than its bound.
func FuzzReadLine(f *testing.F) {
	f.Add([]byte("{}\n"), 8)
	f.Add([]byte("0123456789\n"), 4)
	f.Add([]byte("no newline"), 64)
	f.Fuzz(func(t *testing.T, data []byte, limit int) {
		if limit <= 0 || limit > 1<<16 {
			return
		}
		line, err := readLine(bufio.NewReaderSize(bytes.NewReader(data), 16), limit)
		if err == nil && (len(line) > limit || bytes.IndexByte(line, '\n') >= 0) {
			t.Fatalf("line of %d bytes, limit %d", len(line), limit)
		}
	})
}
