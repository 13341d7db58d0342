package operator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeld/nodeld/internal/config"
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
		if req, err := decodeRequest([]byte(bad)); err == nil {
			t.Errorf("decodeRequest(%s) = %+v, nil error", bad, req)
		}
	}
	req, err := decodeRequest([]byte(" {\"verb\":\"status\",\"node\":\"self\"}\r"))
	if err != nil || req.Verb != VerbStatus || req.Node != config.SelfRef {
		t.Fatalf("decodeRequest = %+v, %v", req, err)
	}
}

// FuzzDecodeOperatorRequest: request lines come from local clients of the
// operator socket. The decoder never panics; what it accepts is one JSON
// object, and the request encodes (as Dial sends it) and decodes
// to itself.
func FuzzDecodeOperatorRequest(f *testing.F) {
	f.Add([]byte(`{"verb":"describe","node":"self"}`))
	f.Add([]byte(`{"verb":"place","node":"","args":{"package":"echo@1.0.0","prefer":["a"],"avoid":[],"dry_run":true},"json":true}`))
	f.Add([]byte(`{"verb":"revoke","node":"self","args":{"subject":{"kind":"package","value":"echo","reason":"x"},"notify":true}}`))
	f.Add([]byte(`{"verb":"stop","node":"n","args":{"instance":"i","grace_ms":-5}}`))
	f.Add([]byte(`{"verb":"status","node":"self"} {"verb":"revoke"}`))
	f.Add([]byte(`{"verb":"status","node":"self"}]`))
	f.Add([]byte(`{"verb":"status","x":1}`))
	f.Add([]byte(`{"args":{"subject":null}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := decodeRequest(line)
		if err != nil {
			return
		}
		if !json.Valid(line) {
			t.Fatalf("accepted %q, not one JSON value", line)
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeRequest(b)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		if diff := cmp.Diff(req, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-decoded +again):\n%s", diff)
		}
	})
}
