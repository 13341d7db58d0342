package runner

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		name   string
		cap    int
		writes []string
		want   string
	}{
		{"empty", 8, nil, ""},
		{"fits", 8, []string{"abc", "de"}, "abcde"},
		{"exactly full", 4, []string{"ab", "cd"}, "abcd"},
		{"wraps", 4, []string{"abc", "def"}, "cdef"},
		{"wraps many times", 3, []string{"a", "b", "c", "d", "e", "f", "g"}, "efg"},
		{"one write over the cap", 4, []string{"x", "0123456789"}, "6789"},
		{"write of exactly the cap", 4, []string{"xy", "abcd"}, "abcd"},
		// "é" is 2 bytes, "€" 3: the cut lands inside them and the
		// leftover continuation bytes are dropped.
		{"cut inside a 2-byte rune", 4, []string{"aé", "xyz"}, "xyz"},
		{"cut inside a 3-byte rune", 5, []string{"a€", "xyz"}, "xyz"},
		{"cut after the rune start", 6, []string{"a€", "xyz"}, "€xyz"},
		{"cut inside a 4-byte rune", 6, []string{"😀", "abc"}, "abc"},
		{"invalid bytes kept when nothing dropped", 8, []string{"\x80\x80ab"}, "\x80\x80ab"},
		{"at most 3 continuation bytes dropped", 5, []string{"\x80\x80\x80\x80\x80z"}, "\x80z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTailBuffer(tt.cap)
			for _, w := range tt.writes {
				n, err := b.Write([]byte(w))
				if n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			got := b.Bytes()
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("Bytes (-want +got):\n%s", diff)
			}
			if len(got) > tt.cap {
				t.Errorf("%d bytes kept, cap %d", len(got), tt.cap)
			}
		})
	}
}

func TestTailBufferKeepsValidUTF8Tail(t *testing.T) {
	text := strings.Repeat("añ€😀", 1000)
	for _, capBytes := range []int{1, 2, 3, 5, 7, 64, 1001} {
		b := newTailBuffer(capBytes)
		for i := 0; i < len(text); i += 13 {
			_, _ = b.Write([]byte(text[i:min(i+13, len(text))]))
		}
		got := b.Bytes()
		if !utf8.Valid(got) || !strings.HasSuffix(text, string(got)) {
			t.Errorf("cap %d: tail %q is not a valid suffix", capBytes, got)
		}
		if capBytes >= 4 && len(got) < capBytes-3 {
			t.Errorf("cap %d: only %d bytes kept", capBytes, len(got))
		}
	}
}

func TestTailBufferConcurrent(t *testing.T) {
	b := newTailBuffer(16)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("0123456789"))
				_ = b.Bytes()
			}
		})
	}
	wg.Wait()
	if got := len(b.Bytes()); got != 16 {
		t.Errorf("%d bytes kept, want 16", got)
	}
}

func BenchmarkTailBufferWrite(b *testing.B) {
	buf := newTailBuffer(DefaultLogCap)
	line := []byte(strings.Repeat("x", 120) + "\n")
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		_, _ = buf.Write(line)
	}
}
