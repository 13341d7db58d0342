package ctlforward

import (
	"encoding/json"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
)

// FuzzDecodeRequest: a forwarded request from the mesh never panics, and
// one that decodes has a verb and survives a round trip unchanged.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"verb":"place","node":"n-1","args":{"package":"echo@1.0.0","prefer":["n-2"]}}`))
	f.Add([]byte(`{"verb":"stop","node":"n-1","args":{"instance":"i-1"}}`))
	f.Add([]byte(`{"verb":"place","node":"","args":{},"sudo":1}`))
	f.Add([]byte(`{"verb":"place"} {}`))
	f.Add([]byte(`{"node":""}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeRequest(b)
		if err != nil {
			return
		}
		if req.Verb == "" {
			t.Fatalf("decoded a request without a verb from %q", b)
		}
		wire, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeRequest(wire)
		if err != nil {
			t.Fatalf("re-encoded request refused: %v\n%s", err, wire)
		}
		if a, b := mustJSON(t, again), string(wire); a != b {
			t.Fatalf("round trip changed the request:\n%s\n%s", a, b)
		}
	})
}

// FuzzDecodeResponse: a forwarded answer never panics, and one that
// decodes has a known class that agrees with ok and is not forwarded.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"ok":true,"class":"ok","node":"n-1","decision_id":"d1","result":{"outcome":"placed"}}`))
	f.Add([]byte(`{"ok":false,"class":"refused","code":"not_leader","reason":"x"}`))
	f.Add([]byte(`{"ok":true,"class":"refused"}`))
	f.Add([]byte(`{"ok":true,"class":"ok","forwarded_to":"n-2"}`))
	f.Add([]byte(`{"ok":true,"class":"ok"} x`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := decodeResponse(b)
		if err != nil {
			return
		}
		if !classes[resp.Class] || resp.OK != (resp.Class == operator.ClassOK) || resp.ForwardedTo != "" {
			t.Fatalf("decoded %+v from %q", resp, b)
		}
		if got := encodeResponse(resp); len(got) > MaxResponseBytes {
			t.Fatalf("encoded answer of %d bytes", len(got))
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
