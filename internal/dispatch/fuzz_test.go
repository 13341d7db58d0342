package dispatch

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeFetchRequest: the fetch frame comes from a peer. The decoder
// never panics, and what it accepts satisfies every check.
func FuzzDecodeFetchRequest(f *testing.F) {
	f.Add([]byte(`{"v":1,"decision_id":"` + testDecided + `","path":"bin/echo","offset":0}`))
	f.Add([]byte(`{"v":1,"decision_id":"` + testDecided + `","path":"a","offset":-1}`))
	f.Add([]byte(`{"v":1} {}`))
	f.Add([]byte(`{"v":1,"x":2}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		req, err := DecodeFetchRequest(p)
		if err != nil {
			if _, ok := errors.AsType[*ArtifactRefusal](err); !ok {
				t.Fatalf("error %T is not a refusal", err)
			}
			return
		}
		if req.V != ArtifactVersion || req.Path == "" || req.Offset < 0 || len(req.DecisionID) != 64 {
			t.Fatalf("accepted %+v", req)
		}
	})
}

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
