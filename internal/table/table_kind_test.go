package table

import (
	"encoding/json"
	"testing"
)

func TestTargetKindJSONRoundTrip(t *testing.T) {
	for _, k := range []TargetKind{TargetLocal, TargetRemote} {
		b, err := json.Marshal(Target{Kind: k})
		if err != nil {
			t.Fatal(err)
		}
		var got Target
		if err := json.Unmarshal(b, &got); err != nil || got.Kind != k {
			t.Fatalf("round trip of %v: %v, %v", k, got.Kind, err)
		}
	}
	var bad Target
	if err := json.Unmarshal([]byte(`{"kind":"sideways"}`), &bad); err == nil {
		t.Fatal("unknown kind accepted")
	}
}
