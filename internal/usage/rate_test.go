package usage

import (
	"testing"
	"time"
)

func TestRate(t *testing.T) {
	tail := []byte(`{"usage":{"prompt_tokens":3,"completion_tokens":50,"total_tokens":53}}`)
	tests := []struct {
		name             string
		tail             []byte
		stream           bool
		total, firstByte time.Duration
		wantN            int
		wantRate         float64
	}{
		{name: "one-shot: the whole exchange", tail: tail, total: 500 * time.Millisecond, firstByte: 400 * time.Millisecond, wantN: 50, wantRate: 100},
		{name: "stream: after the first byte", tail: tail, stream: true, total: 600 * time.Millisecond, firstByte: 100 * time.Millisecond, wantN: 50, wantRate: 100},
		{name: "window too short", tail: tail, stream: true, total: 105 * time.Millisecond, firstByte: 100 * time.Millisecond, wantN: 50},
		{name: "no usage", tail: []byte(`{"choices":[]}`), total: time.Second},
		{name: "empty", total: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, rate := Rate(tt.tail, tt.stream, tt.total, tt.firstByte)
			if n != tt.wantN || rate != tt.wantRate {
				t.Errorf("Rate = %d, %v; want %d, %v", n, rate, tt.wantN, tt.wantRate)
			}
		})
	}
}
