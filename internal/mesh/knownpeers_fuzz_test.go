package mesh

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodeKnownPeers: the pin file is read back at every start and may
// have been damaged or written by another party. The decoder never panics;
// what it accepts is one JSON document with one pin per address, each a 32-byte key with the id
// derived from it, and encodes (as writeKnownPeers writes it) to a file that decodes to the same pins.
func FuzzDecodeKnownPeers(f *testing.F) {
	key := strings.Repeat("ab", 32)
	f.Add([]byte(`{"version":1,"peers":[]}`))
	f.Add([]byte(`{"version":1,"peers":null}`))
	f.Add([]byte(`{"version":1,"peers":[{"addr":"10.0.0.2:7400","key":"` + key + `","id":"n-x","pinned_at":"2026-01-02T03:04:05.123456789Z"}]}` + "\n"))
	f.Add([]byte(`{"version":1,"peers":[{"addr":"a:1","key":"` + strings.ToUpper(key) + `","pinned_at":"2026-01-02T03:04:05+02:00"}]}`))
	f.Add([]byte(`{"version":1,"peers":[{"addr":"a:1","key":"` + key + `"},{"addr":"a:1","key":"` + key + `"}]}`))
	f.Add([]byte(`{"version":1,"peers":[]}}`))
	f.Add([]byte(`{"version":1,"peers":[{"addr":"a","key":"zz"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		pins, err := decodeKnownPeers(data)
		if err != nil {
			if pins != nil {
				t.Fatal("pins returned with an error")
			}
			return
		}
		// One document, nothing after it, and no entry lost to another
		// for the same address.
		var doc knownPeersDoc
		if !json.Valid(data) || json.Unmarshal(data, &doc) != nil || len(doc.Peers) != len(pins) {
			t.Fatalf("accepted %q: %d pins of %d entries", data, len(pins), len(doc.Peers))
		}
		for addr, p := range pins {
			if p.Addr != addr || len(p.Key) != 64 || strings.ToLower(p.Key) != p.Key || p.ID == "" {
				t.Fatalf("pin %q = %+v", addr, p)
			}
		}
		b, err := encodeKnownPeers(pins)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeKnownPeers(b)
		if err != nil {
			t.Fatalf("written pins do not load: %v", err)
		}
		if diff := cmp.Diff(pins, again); diff != "" {
			t.Fatalf("round trip (-decoded +reloaded):\n%s", diff)
		}
	})
}
