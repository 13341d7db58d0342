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

// completionTokensBefore is CompletionTokens as it was before it looked
// for its key with its own loop: the reference its answers are compared
// with.
func completionTokensBefore(tail []byte) (int, bool) {
	const key = `"completion_tokens"`
	i := bytes.LastIndex(tail, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(tail[i+len(key):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return 0, false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	n, digits := 0, 0
	for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
		if digits == maxTokenDigits {
			return 0, false
		}
		n = n*10 + int(rest[digits]-'0')
		digits++
	}
	if digits == 0 || digits == len(rest) {
		return 0, false
	}
	return n, true
}

// TestCompletionTokensAsBefore: tails made of the key, its parts and
// numbers, in every order, are read as before.
func TestCompletionTokensAsBefore(t *testing.T) {
	parts := []string{`"completion_tokens"`, `"completion_tokens`, `"c`, `"`, `:`, ` `, `12`, `}`, `"completion_tokens":5,`, `x`}
	var walk func(prefix string, depth int)
	walk = func(prefix string, depth int) {
		tail := []byte(prefix)
		n, ok := CompletionTokens(tail)
		if wantN, wantOK := completionTokensBefore(tail); n != wantN || ok != wantOK {
			t.Fatalf("CompletionTokens(%q) = %d, %t; before, %d, %t", tail, n, ok, wantN, wantOK)
		}
		if depth == 0 {
			return
		}
		for _, p := range parts {
			walk(prefix+p, depth-1)
		}
	}
	walk("", 5)
}

func FuzzCompletionTokensAsBefore(f *testing.F) {
	f.Add([]byte(`{"usage":{"completion_tokens":345}}`))
	f.Add([]byte(`"completion_tokens"`))
	f.Fuzz(func(t *testing.T, tail []byte) {
		n, ok := CompletionTokens(tail)
		if wantN, wantOK := completionTokensBefore(tail); n != wantN || ok != wantOK {
			t.Fatalf("CompletionTokens(%q) = %d, %t; before, %d, %t", tail, n, ok, wantN, wantOK)
		}
	})
}

// benchAnswer is a one-shot chat completion's body, and benchStream the
// last kilobyte of a stream ending with its usage report.
var (
	benchAnswer = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"bench",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}`)
	benchStream = func() []byte {
		chunk := `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n"
		end := `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":200,"total_tokens":212}}` + "\n\ndata: [DONE]\n\n"
		s := bytes.Repeat([]byte(chunk), TailBytes/len(chunk)+1)
		s = append(s, end...)
		return s[len(s)-TailBytes:]
	}()
)

func BenchmarkCompletionTokens(b *testing.B) {
	for _, bb := range []struct {
		name string
		tail []byte
		want int
	}{{"answer", benchAnswer, 9}, {"stream", benchStream, 200}} {
		b.Run(bb.name, func(b *testing.B) {
			for b.Loop() {
				if n, ok := CompletionTokens(bb.tail); n != bb.want || !ok {
					b.Fatal(n, ok)
				}
			}
		})
	}
}
