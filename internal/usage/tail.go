package usage

import "sync"

const (
	// TailBytes is how much of the end of a completion response a Tail
	// keeps to find its final usage report ("completion_tokens"): the
	// last SSE event with usage, then "data: [DONE]", or the end of a
	// JSON body, fit with room for a server's extra fields.
	TailBytes = 1024
	// maxTokenDigits bounds the digits of a completion token count.
	maxTokenDigits = 9
)

// Tail keeps the last TailBytes written to it, in a ring: keeping costs a
// copy of at most TailBytes per write and no parsing; the usage report is
// looked for once, when the response has ended.
type Tail struct {
	buf  [TailBytes]byte
	pos  int  // next write position
	full bool // the ring has wrapped
}

var tailPool = sync.Pool{New: func() any { return new(Tail) }}

// GetTail returns an empty Tail from the pool.
func GetTail() *Tail {
	t := tailPool.Get().(*Tail)
	t.pos, t.full = 0, false
	return t
}

// PutTail returns t to the pool; t must not be used after. A nil t is
// ignored.
func PutTail(t *Tail) {
	if t != nil {
		tailPool.Put(t)
	}
}

// Keep adds p to the end kept.
func (t *Tail) Keep(p []byte) {
	if len(p) >= TailBytes {
		copy(t.buf[:], p[len(p)-TailBytes:])
		t.pos, t.full = 0, true
		return
	}
	n := copy(t.buf[t.pos:], p)
	if n < len(p) {
		copy(t.buf[:], p[n:])
		t.full = true
	}
	t.pos = (t.pos + len(p)) % TailBytes
	if t.pos == 0 && len(p) > 0 {
		t.full = true
	}
}

// Bytes returns what the ring holds, oldest first.
func (t *Tail) Bytes() []byte {
	if !t.full {
		return t.buf[:t.pos]
	}
	out := make([]byte, 0, TailBytes)
	out = append(out, t.buf[t.pos:]...)
	return append(out, t.buf[:t.pos]...)
}

// CompletionTokens finds the last "completion_tokens" count in tail: the
// final usage report of an OpenAI completion, streamed or not. It reads a
// non-negative integer of at most maxTokenDigits digits after the key.
func CompletionTokens(tail []byte) (int, bool) {
	const key = `"completion_tokens"`
	// The key's last occurrence, looked for from the end, where the
	// report is: a loop on the key's first two bytes finds it in a few
	// dozen compares (bytes.LastIndex hashes every byte it passes).
	i := len(tail) - len(key)
	for ; i >= 0; i-- {
		if tail[i] == '"' && tail[i+1] == 'c' && string(tail[i:i+len(key)]) == key {
			break
		}
	}
	if i < 0 {
		return 0, false
	}
	rest := skipSpace(tail[i+len(key):])
	if len(rest) == 0 || rest[0] != ':' {
		return 0, false
	}
	rest = skipSpace(rest[1:])
	n, digits := 0, 0
	for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
		if digits == maxTokenDigits {
			return 0, false
		}
		n = n*10 + int(rest[digits]-'0')
		digits++
	}
	if digits == 0 || digits == len(rest) {
		// No number, or one cut off by the end of the tail.
		return 0, false
	}
	return n, true
}

// skipSpace returns b after its leading JSON whitespace (bytes.TrimLeft
// builds its set of bytes on every call).
func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}
