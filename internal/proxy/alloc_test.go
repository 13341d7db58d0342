package proxy

import (
	"bytes"
	"io"
	"net/http/httptest"
	"testing"
)

// TestReadBodyOfItsDeclaredLength: a body of its declared length is read
// in its one allocation; one longer than declared is read whole, within
// the limit.
func TestReadBodyOfItsDeclaredLength(t *testing.T) {
	w := httptest.NewRecorder()
	src := bytes.NewReader(nil)
	read := func(in string, declared int64) ([]byte, error) {
		src.Reset([]byte(in))
		return readBody(w, &bodyReader{r: io.NopCloser(src)}, declared, 64)
	}
	if got, err := read(`{"a":1}`, 7); err != nil || string(got) != `{"a":1}` {
		t.Fatalf("declared length: %q, %v", got, err)
	}
	if got, err := read(`{"a":12}`, 7); err != nil || string(got) != `{"a":12}` {
		t.Fatalf("longer than declared: %q, %v", got, err)
	}
	if got, err := read(`{"a"`, 7); err != nil || string(got) != `{"a"` {
		t.Fatalf("shorter than declared: %q, %v", got, err)
	}
	if raceEnabled {
		return // the race detector allocates
	}
	body := &bodyReader{r: io.NopCloser(src)}
	in := []byte(`{"model":"x","messages":[]}`)
	n := testing.AllocsPerRun(100, func() {
		src.Reset(in)
		if got, err := readBody(w, body, int64(len(in)), 64); err != nil || len(got) != len(in) {
			t.Fatalf("%q, %v", got, err)
		}
	})
	if n != 1 {
		t.Errorf("a body of its declared length takes %v allocations, want 1", n)
	}
}
