package host

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const testDecision = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestDecodeFetchRequest(t *testing.T) {
	tests := []struct {
		name string
		give string
		want FetchRequest
		bad  bool
	}{
		{name: "ok", give: `{"v":1,"decision_id":"` + testDecision + `","path":"bin/x","offset":5}`,
			want: FetchRequest{V: 1, DecisionID: testDecision, Path: "bin/x", Offset: 5}},
		{name: "version", give: `{"v":2,"decision_id":"` + testDecision + `","path":"x","offset":0}`, bad: true},
		{name: "decision", give: `{"v":1,"decision_id":"AB","path":"x","offset":0}`, bad: true},
		{name: "empty path", give: `{"v":1,"decision_id":"` + testDecision + `","path":"","offset":0}`, bad: true},
		{name: "negative offset", give: `{"v":1,"decision_id":"` + testDecision + `","path":"x","offset":-1}`, bad: true},
		{name: "unknown field", give: `{"v":1,"decision_id":"` + testDecision + `","path":"x","offset":0,"z":1}`, bad: true},
		{name: "trailing", give: `{"v":1,"decision_id":"` + testDecision + `","path":"x","offset":0}{}`, bad: true},
		{name: "too large", give: strings.Repeat(" ", MaxArtifactControlBytes+1), bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeFetchRequest([]byte(tt.give))
			if tt.bad {
				if !errors.Is(err, ErrArtifactMalformed) {
					t.Fatalf("err = %v, want ErrArtifactMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeFetchHeaderAndRefusal(t *testing.T) {
	if _, err := DecodeFetchHeader([]byte(`{"size":3,"offset":4}`)); err == nil {
		t.Error("offset beyond size accepted")
	}
	h, err := DecodeFetchHeader([]byte(`{"size":10,"offset":4}`))
	if diff := cmp.Diff(FetchHeader{Size: 10, Offset: 4}, h); diff != "" || err != nil {
		t.Errorf("header (-want +got):\n%s %v", diff, err)
	}
	r, err := DecodeArtifactRefusal([]byte(`{"code":"weird","message":"` + strings.Repeat("é", 200) + `"}`))
	if err != nil || r.Code != ArtifactIO || len(r.Message) > MaxArtifactMessageBytes || !strings.HasPrefix(r.Message, "é") {
		t.Errorf("refusal = %+v %v", r, err)
	}
}

func TestSplitPiece(t *testing.T) {
	for _, n := range []int{0, pieceHashBytes, pieceHashBytes + MaxPieceBytes + 1} {
		if _, _, err := SplitPiece(make([]byte, n)); err == nil {
			t.Errorf("piece frame of %d bytes accepted", n)
		}
	}
	sum, data, err := SplitPiece(make([]byte, pieceHashBytes+3))
	if err != nil || len(sum) != pieceHashBytes || len(data) != 3 {
		t.Errorf("split = %d %d %v", len(sum), len(data), err)
	}
}

func TestTailUTF8(t *testing.T) {
	tests := []struct {
		give     string
		n        int
		want     string
		wantTrim bool
	}{
		{give: "hello", n: 10, want: "hello"},
		{give: "héllo", n: 4, want: "llo", wantTrim: true},
		{give: "aé", n: 1, want: "", wantTrim: true},
	}
	for _, tt := range tests {
		got, cut := tailUTF8([]byte(tt.give), tt.n)
		if got != tt.want || cut != tt.wantTrim {
			t.Errorf("tailUTF8(%q, %d) = %q %v, want %q %v", tt.give, tt.n, got, cut, tt.want, tt.wantTrim)
		}
	}
}

func TestInstanceIDDeterministic(t *testing.T) {
	a := InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{}, "n-1")
	if b := InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{}, "n-1"); a != b {
		t.Errorf("same input, ids %q and %q", a, b)
	}
	for _, other := range []string{
		InstanceID("echo", "1.1", "default", testDecision, InstanceConfig{}, "n-1"),
		InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{Port: 8080}, "n-1"),
		InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{}, "n-2"),
	} {
		if other == a {
			t.Errorf("different input, same id %q", a)
		}
	}
}
