package usage

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
)

func TestTailKeepsTheEnd(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		tail := GetTail()
		var all []byte
		for range rng.IntN(20) {
			chunk := make([]byte, rng.IntN(3*TailBytes/2))
			for i := range chunk {
				chunk[i] = byte('a' + rng.IntN(26))
			}
			all = append(all, chunk...)
			tail.Keep(chunk)
		}
		want := all[max(0, len(all)-TailBytes):]
		if got := tail.Bytes(); !bytes.Equal(got, want) {
			t.Fatalf("trial %d: tail of %d bytes holds %d bytes, not the last ones", trial, len(all), len(got))
		}
		PutTail(tail)
	}
}

func TestCompletionTokens(t *testing.T) {
	tests := []struct {
		give   string
		want   int
		wantOK bool
	}{
		{`"usage":{"prompt_tokens":12,"completion_tokens":345,"total_tokens":357}}`, 345, true},
		{`"completion_tokens" :  7 }`, 7, true},
		{"data: {\"usage\":{\"completion_tokens\":1}}\n\ndata: {\"usage\":{\"completion_tokens\":99}}\n\ndata: [DONE]\n\n", 99, true},
		{`"completion_tokens_details":{"reasoning_tokens":5}}`, 0, false},
		{`"completion_tokens":null}`, 0, false},
		{`"completion_tokens":"5"}`, 0, false},
		{`"completion_tokens":-5}`, 0, false},
		{`"completion_tokens":12`, 0, false}, // cut off: maybe longer
		{`"completion_tokens":1234567890}`, 0, false},
		{`"prompt_tokens":3}`, 0, false},
		{``, 0, false},
	}
	for _, tt := range tests {
		got, ok := CompletionTokens([]byte(tt.give))
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("CompletionTokens(%q) = %d, %v; want %d, %v", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
}

func FuzzCompletionTokens(f *testing.F) {
	f.Add([]byte(`{"usage":{"completion_tokens":345}}`))
	f.Add([]byte(`"completion_tokens": 999999999,`))
	f.Fuzz(func(t *testing.T, tail []byte) {
		n, ok := CompletionTokens(tail)
		if !ok {
			return
		}
		if n < 0 || n > 999999999 {
			t.Fatalf("count %d", n)
		}
		if !bytes.Contains(tail, []byte(`"completion_tokens"`)) || !bytes.Contains(tail, []byte(strconv.Itoa(n))) {
			t.Fatalf("count %d is not in %q", n, tail)
		}
	})
}
