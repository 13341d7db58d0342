package ctl

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeFetchRequest(t *testing.T) {
	tests := []struct {
		name string
		give string
		want FetchRequest
		bad  bool
	}{
		{name: "ok", give: `{"v":1,"decision_id":"` + testDecision + `","path":"bin/x","offset":5}`,
			want: FetchRequest{V: 1, DecisionID: testDecision, Path: "bin/x", Offset: 5}},
		{name: "trailing space", give: `{"v":1,"decision_id":"` + testDecision + `","path":"x","offset":0} `,
			want: FetchRequest{V: 1, DecisionID: testDecision, Path: "x"}},
		{name: "version", give: `{"v":2,"decision_id":"` + testDecision + `","path":"x","offset":0}`, bad: true},
		{name: "decision", give: `{"v":1,"decision_id":"AB","path":"x","offset":0}`, bad: true},
		{name: "empty path", give: `{"v":1,"decision_id":"` + testDecision + `","path":"","offset":0}`, bad: true},
		{name: "long path", give: `{"v":1,"decision_id":"` + testDecision + `","path":"` + strings.Repeat("a", MaxArtifactPathBytes+1) + `","offset":0}`, bad: true},
		{name: "negative offset", give: `{"v":1,"decision_id":"` + testDecision + `","path":"x","offset":-1}`, bad: true},
		{name: "unknown field", give: `{"v":1,"decision_id":"` + testDecision + `","path":"x","offset":0,"z":1}`, bad: true},
		{name: "trailing", give: `{"v":1,"decision_id":"` + testDecision + `","path":"x","offset":0}{}`, bad: true},
		{name: "trailing brace", give: `{"v":1,"decision_id":"` + testDecision + `","path":"x","offset":0}}`, bad: true},
		{name: "not json", give: `{`, bad: true},
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
	if _, err := DecodeFetchHeader([]byte(`{"size":3,"offset":4}`)); !errors.Is(err, ErrArtifactMalformed) {
		t.Errorf("offset beyond size: err = %v, want ErrArtifactMalformed", err)
	}
	h, err := DecodeFetchHeader([]byte(`{"size":10,"offset":4}`))
	if diff := cmp.Diff(FetchHeader{Size: 10, Offset: 4}, h); diff != "" || err != nil {
		t.Errorf("header (-want +got):\n%s %v", diff, err)
	}
	r, err := DecodeArtifactRefusal([]byte(`{"code":"weird","message":"` + strings.Repeat("é", 200) + `"}`))
	if err != nil || r.Code != ArtifactIO || len(r.Message) > MaxArtifactMessageBytes || !strings.HasPrefix(r.Message, "é") {
		t.Errorf("refusal = %+v %v", r, err)
	}
	r, err = DecodeArtifactRefusal([]byte(`{"code":"not_listed","message":"no"}`))
	if diff := cmp.Diff(&ArtifactRefusal{Code: ArtifactNotListed, Message: "no"}, r); diff != "" || err != nil {
		t.Errorf("refusal (-want +got):\n%s %v", diff, err)
	}
}

func TestSplitPiece(t *testing.T) {
	for _, n := range []int{0, PieceHashBytes, PieceHashBytes + MaxPieceBytes + 1} {
		if _, _, err := SplitPiece(make([]byte, n)); !errors.Is(err, ErrArtifactMalformed) {
			t.Errorf("piece frame of %d bytes: err = %v, want ErrArtifactMalformed", n, err)
		}
	}
	sum, data, err := SplitPiece(make([]byte, PieceHashBytes+3))
	if err != nil || len(sum) != PieceHashBytes || len(data) != 3 {
		t.Errorf("split = %d %d %v", len(sum), len(data), err)
	}
}
