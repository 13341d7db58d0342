package plane

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/facts"
)

func describeResult(t testing.TB, fs json.RawMessage) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(ctl.DescribeResult{Facts: fs, Advertisement: json.RawMessage(`{}`), ChainHead: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeDescribe(t *testing.T) {
	k, id := testKey(t, 7)
	f := sampleFacts()
	f.NodeID = id
	s, err := facts.Sign(k, f, 3, t0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(s)
	got, err := DecodeDescribe(describeResult(t, good))
	if err != nil {
		t.Fatal(err)
	}
	if _, meta, err := facts.Verify(got, k.Public().(ed25519.PublicKey), t0); err != nil || meta.Seq != 3 {
		t.Fatalf("decoded facts do not verify: %v (seq %d)", err, meta.Seq)
	}
	for name, raw := range map[string]json.RawMessage{
		"null facts":    describeResult(t, json.RawMessage("null")),
		"empty object":  describeResult(t, json.RawMessage("{}")),
		"unknown field": describeResult(t, json.RawMessage(`{"payload":{},"public_key":"a","signature":"b","x":1}`)),
		"not a result":  json.RawMessage(`[1,2]`),
		"trailing":      json.RawMessage(string(describeResult(t, good)) + "{}"),
	} {
		if _, err := DecodeDescribe(raw); err == nil {
			t.Errorf("%s: decoded", name)
		} else if name == "null facts" && !errors.Is(err, ErrNoFacts) {
			t.Errorf("%s: %v, want ErrNoFacts", name, err)
		}
	}
}

func FuzzDecodeDescribe(f *testing.F) {
	k, id := testKey(f, 7)
	fa := sampleFacts()
	fa.NodeID = id
	s, err := facts.Sign(k, fa, 1, t0, time.Minute)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := json.Marshal(s)
	f.Add([]byte(describeResult(f, good)))
	f.Add([]byte(describeResult(f, json.RawMessage("null"))))
	f.Add([]byte(`{"facts":{"payload":1},"advertisement":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeDescribe(data)
		if err == nil && (len(s.Payload) == 0 || s.PublicKey == "" || s.Signature == "") {
			t.Fatalf("accepted incomplete facts %+v", s)
		}
	})
}
