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

// A request line holds one request: a second one, or anything else after
// the object, is refused rather than silently dropped.
func TestDecodeOperatorRequestTrailingData(t *testing.T) {
	for _, bad := range []string{
		`{"verb":"status","node":"self"} {"verb":"revoke","node":"self"}`,
		`{"verb":"status","node":"self"}}`,
		`{"verb":"status","node":"self"}]`,
		`{"verb":"status","node":"self"} x`,
		`{"verb":"status","node":"self","x":1}`,
	} {
		if req, err := decodeOperatorRequest([]byte(bad)); err == nil {
			t.Errorf("decodeOperatorRequest(%s) = %+v, nil error", bad, req)
		}
	}
	req, err := decodeOperatorRequest([]byte(" {\"verb\":\"status\",\"node\":\"self\"}\r"))
	if err != nil || req.Verb != VerbStatus || req.Node != SelfRef {
		t.Fatalf("decodeOperatorRequest = %+v, %v", req, err)
	}
}
