package plane

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
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

// describeFacts is sampleFacts for test key 7, signed at seq to live a
// minute from t0, as JSON, and the key.
func describeFacts(t testing.TB, seq uint64) (ed25519.PrivateKey, json.RawMessage) {
	t.Helper()
	k, id := testKey(t, 7)
	f := sampleFacts()
	f.NodeID = id
	s, err := facts.Sign(k, f, seq, t0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(s)
	return k, good
}

func TestDecodeDescribe(t *testing.T) {
	k, good := describeFacts(t, 3)
	got, err := DecodeDescribe(describeResult(t, good))
	if err != nil {
		t.Fatal(err)
	}
	if got.Host != nil || got.HostNote == "" {
		t.Errorf("advertisement {}: host %+v, note %q; want none, with why", got.Host, got.HostNote)
	}
	if _, meta, err := facts.Verify(got.Facts, k.Public().(ed25519.PublicKey), t0); err != nil || meta.Seq != 3 {
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
	_, good := describeFacts(f, 1)
	f.Add([]byte(describeResult(f, good)))
	f.Add([]byte(describeResult(f, json.RawMessage("null"))))
	f.Add([]byte(`{"facts":{"payload":1},"advertisement":null}`))
	f.Add([]byte(describeHost(f, good, `{"name":"workload-host","metadata":{"instances":"1","in_flight":"0","enabled":"true"}}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := DecodeDescribe(data)
		s := d.Facts
		if err == nil && (len(s.Payload) == 0 || s.PublicKey == "" || s.Signature == "") {
			t.Fatalf("accepted incomplete facts %+v", s)
		}
		if err == nil && (d.Host == nil) == (d.HostNote == "") {
			t.Fatalf("host %+v with note %q: want exactly one", d.Host, d.HostNote)
		}
	})
}

func describeHost(t testing.TB, fs json.RawMessage, ad string) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(ctl.DescribeResult{Facts: fs, Advertisement: json.RawMessage(ad)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The describe's workload-host advertisement says whether the node's
// host takes workloads; without one (or one that is not readable) the
// node has no host the controller can place on.
func TestDecodeDescribeHost(t *testing.T) {
	_, good := describeFacts(t, 3)
	ad := func(enabled string) string {
		return `{"name":"workload-host","node_id":"x","methods":[],"version":"1","metadata":{"instances":"2","in_flight":"0","enabled":"` + enabled + `","label.zone":"a"},"last_updated":5}`
	}
	for _, tt := range []struct {
		name, ad string
		enabled  *bool
		note     string
	}{
		{name: "enabled", ad: ad("true"), enabled: new(true)},
		{name: "disabled", ad: ad("false"), enabled: new(false)},
		{name: "null", ad: "null", note: "shows no workload host"},
		{name: "another advertisement", ad: `{"name":"infer.chat","metadata":{}}`, note: "shows no workload host"},
		{name: "bad enabled", ad: ad("maybe"), note: "not readable"},
		{name: "not an object", ad: `[1]`, note: "not readable"},
	} {
		d, err := DecodeDescribe(describeHost(t, good, tt.ad))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		switch {
		case tt.enabled != nil && (d.Host == nil || d.Host.Enabled != *tt.enabled || d.Host.Instances != 2):
			t.Errorf("%s: host %+v (%s), want enabled %v with 2 instances", tt.name, d.Host, d.HostNote, *tt.enabled)
		case tt.enabled == nil && (d.Host != nil || !strings.Contains(d.HostNote, tt.note)):
			t.Errorf("%s: host %+v, note %q; want none, note with %q", tt.name, d.Host, d.HostNote, tt.note)
		}
	}
}
