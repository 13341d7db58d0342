package runner

import (
	"sync"
	"unicode/utf8"
)

// tailBuffer keeps the last cap bytes written to it: an io.Writer that
// never fails and never grows past its cap, for a process's output stream.
// It is safe for concurrent use.
type tailBuffer struct {
	// mu guards buf, start, n and total.
	mu sync.Mutex
	// buf is the ring, allocated once at its full cap.
	buf []byte
	// start is the index of the oldest kept byte; n the bytes kept.
	start, n int
	// total counts every byte ever written, kept or not.
	total int64
}

// newTailBuffer returns a tailBuffer that keeps the last capBytes bytes;
// capBytes must be positive (the caller has bounded it by maxLogCap).
func newTailBuffer(capBytes int) *tailBuffer {
	return &tailBuffer{buf: make([]byte, capBytes)}
}

// Write keeps the tail of p; it always reports len(p) written.
func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	written := len(p)
	b.total += int64(written)
	c := len(b.buf)
	if len(p) >= c {
		copy(b.buf, p[len(p)-c:])
		b.start, b.n = 0, c
		return written, nil
	}
	for len(p) > 0 {
		end := (b.start + b.n) % c
		k := copy(b.buf[end:], p) // up to the end of the ring
		p = p[k:]
		// Bytes past the cap overwrote the oldest ones: start moves on.
		if b.n+k > c {
			over := b.n + k - c
			b.start = (b.start + over) % c
			b.n = c
		} else {
			b.n += k
		}
	}
	return written, nil
}

// Bytes returns a copy of the kept tail, cut so that it starts on a UTF-8
// boundary when older bytes were dropped: continuation bytes left over from
// a character whose start was dropped are removed (at most
// utf8.UTFMax-1 of them). Bytes that were never valid UTF-8 are returned as
// written.
func (b *tailBuffer) Bytes() []byte {
	b.mu.Lock()
	out := make([]byte, b.n)
	c := len(b.buf)
	first := copy(out, b.buf[b.start:min(b.start+b.n, c)])
	copy(out[first:], b.buf[:b.n-first])
	dropped := b.total > int64(b.n)
	b.mu.Unlock()
	if dropped {
		out = trimPartialRune(out)
	}
	return out
}

// trimPartialRune drops leading UTF-8 continuation bytes (10xxxxxx), at most
// utf8.UTFMax-1, the remains of a character cut at the front.
func trimPartialRune(p []byte) []byte {
	for i := 0; i < utf8.UTFMax-1 && len(p) > 0 && !utf8.RuneStart(p[0]); i++ {
		p = p[1:]
	}
	return p
}
