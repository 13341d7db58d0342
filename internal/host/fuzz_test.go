package host

import "testing"

func FuzzDecodeFetchRequest(f *testing.F) {
	f.Add([]byte(`{"v":1,"decision_id":"` + testDecision + `","path":"bin/x","offset":5}`))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := DecodeFetchRequest(p)
		if err == nil && (r.Offset < 0 || r.Path == "" || r.V != ArtifactVersion) {
			t.Fatalf("accepted %+v", r)
		}
	})
}

func FuzzDecodeFetchHeader(f *testing.F) {
	f.Add([]byte(`{"size":10,"offset":4}`))
	f.Add([]byte(`{"size":-1,"offset":0}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := DecodeFetchHeader(p)
		if err == nil && (h.Size < 0 || h.Offset < 0 || h.Offset > h.Size) {
			t.Fatalf("accepted %+v", h)
		}
	})
}

func FuzzDecodeArtifactRefusal(f *testing.F) {
	f.Add([]byte(`{"code":"not_listed","message":"no"}`))
	f.Add([]byte(`{"code":"x","message":"\u00e9\u00e9"}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := DecodeArtifactRefusal(p)
		if err == nil && len(r.Message) > MaxArtifactMessageBytes {
			t.Fatalf("message of %d bytes kept", len(r.Message))
		}
	})
}

func FuzzSplitPiece(f *testing.F) {
	f.Add(make([]byte, 40))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, p []byte) {
		sum, data, err := SplitPiece(p)
		if err == nil && (len(sum) != pieceHashBytes || len(data) == 0 || len(data) > MaxPieceBytes) {
			t.Fatalf("split %d into %d+%d", len(p), len(sum), len(data))
		}
	})
}
