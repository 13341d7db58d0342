package proxy

import (
	"bytes"
	"io"
	"net/http/httptest"
	"testing"
	"unsafe"
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

// TestRemotePathAllocations: a request the proxy forwards to a peer (a
// RemoteForwarder that answers from memory, a raw keep-alive client)
// costs at most the allocations counted here: each cut lowers the bound.
func TestRemotePathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	answer := []byte(`{"ok":true}`)
	one := remoteExchange(t, remoteAnswering(t, answer, false, 4, nil), len(answer))
	one()
	// The request head's text and its request, the body, the request's
	// state.
	const want = 4
	if n := testing.AllocsPerRun(200, one); n > want {
		t.Errorf("a remote forward allocates %v times, want at most %d", n, want)
	}
}

// TestRequestStateSizes: a request allocates only its route's state, in a
// smaller size class than the 768 bytes of one struct holding both
// routes' parts (736 bytes).
func TestRequestStateSizes(t *testing.T) {
	if n := unsafe.Sizeof(localState{}); n > 416 {
		t.Errorf("a local forward's state is %d bytes, want at most 416", n)
	}
	if n := unsafe.Sizeof(remoteState{}); n > 576 {
		t.Errorf("a remote forward's state is %d bytes, want at most 576", n)
	}
}
