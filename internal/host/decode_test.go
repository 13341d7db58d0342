package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/pkg"
)

// decodeInstanceConfig refuses anything after the config object, a stray
// closing bracket included (json.Decoder's More does not see one).
func TestDecodeInstanceConfigTrailingData(t *testing.T) {
	for _, bad := range []string{`{"port":1}}`, `{"port":1}]`, `{"port":1} {}`, `{"port":1} x`, `{"port":1,"x":2}`} {
		var c ctl.InstanceConfig
		if err := decodeInstanceConfig([]byte(bad), &c); err == nil {
			t.Errorf("decodeInstanceConfig(%s) = %+v, nil error", bad, c)
		}
	}
	var c ctl.InstanceConfig
	if err := decodeInstanceConfig([]byte(" {\"port\":1,\"workload\":\"w\"}\n"), &c); err != nil || c != (ctl.InstanceConfig{Port: 1, Workload: "w"}) {
		t.Fatalf("decodeInstanceConfig = %+v, %v", c, err)
	}
}

// FuzzDecodeInstanceConfig: a place's instance config comes from a
// controller. The decoder never panics; a config it accepts is one JSON
// object, and one that validates encodes (as the controller sends it) and
// decodes to itself, so both sides derive the same instance id.
func FuzzDecodeInstanceConfig(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"port":8080,"workload":"chat"}`))
	f.Add([]byte(`{"port":-1}`))
	f.Add([]byte(`{"port":1e3}`))
	f.Add([]byte(`{"port":1,"port":2}`))
	f.Add([]byte(`{"Port":1}`))
	f.Add([]byte(`{"port":1}]`))
	f.Add([]byte(`{"workload":"` + strings.Repeat("w", 100) + `"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, p []byte) {
		var c ctl.InstanceConfig
		if err := decodeInstanceConfig(p, &c); err != nil {
			return
		}
		if !json.Valid(p) {
			t.Fatalf("accepted %q, not one JSON value", p)
		}
		if c.Validate() != nil {
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var again ctl.InstanceConfig
		if err := decodeInstanceConfig(b, &again); err != nil || again != c {
			t.Fatalf("round trip of %+v: %+v, %v", c, again, err)
		}
		if ctl.InstanceID("p", "1", "v", strings.Repeat("a", 64), c, "n") != ctl.InstanceID("p", "1", "v", strings.Repeat("a", 64), again, "n") {
			t.Fatal("instance id changed across the round trip")
		}
	})
}

// fuzzStream is a holder's side of an artifact stream: what it sends is
// fixed, what the fetcher writes is dropped.
type fuzzStream struct{ r io.Reader }

func (s fuzzStream) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s fuzzStream) Write(p []byte) (int, error) { return len(p), nil }
func (s fuzzStream) Close() error                { return nil }

// fuzzArtifactStream frames a holder's answer for a file of content.
func fuzzArtifactStream(tb testing.TB, size, offset int64, pieces ...[]byte) []byte {
	tb.Helper()
	var b bytes.Buffer
	hdr, _ := json.Marshal(ctl.FetchHeader{Size: size, Offset: offset})
	if err := mesh.WriteFrame(&b, ctl.FrameHeader, hdr); err != nil {
		tb.Fatal(err)
	}
	for _, p := range pieces {
		sum := sha256.Sum256(p)
		if err := mesh.WriteFrame(&b, ctl.FramePiece, append(sum[:], p...)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := mesh.WriteFrame(&b, ctl.FrameEnd, nil); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// FuzzFetchStream: an artifact stream's frames come from the peer that
// holds the package. One fetch round over them never panics or hangs,
// writes only bytes of pieces whose hash matched and never past the size
// the manifest lists, returns only fetch errors, and succeeds only with
// the whole file written.
func FuzzFetchStream(f *testing.F) {
	f.Add(fuzzArtifactStream(f, 10, 0, []byte("hello"), []byte("world")), int64(10), int64(0))
	f.Add(fuzzArtifactStream(f, 10, 5, []byte("world")), int64(10), int64(5))
	f.Add(fuzzArtifactStream(f, 0, 0), int64(0), int64(0))
	f.Add(fuzzArtifactStream(f, 4, 0, []byte("hello")), int64(4), int64(0))
	f.Add(fuzzArtifactStream(f, 10, 0, []byte("hello")), int64(10), int64(0))
	f.Add(fuzzArtifactStream(f, 9, 0, []byte("hello")), int64(10), int64(0))
	bad := fuzzArtifactStream(f, 5, 0, []byte("hello"))
	bad[len(bad)-6] ^= 1 // the piece's last byte
	f.Add(bad, int64(5), int64(0))
	var refusal bytes.Buffer
	_ = mesh.WriteFrame(&refusal, ctl.FrameRefusal, []byte(`{"code":"not_listed","message":"no"}`))
	f.Add(refusal.Bytes(), int64(1), int64(0))
	f.Add([]byte{byte(ctl.FrameHeader), 0, 0, 0xff, 0xff}, int64(1), int64(0))
	f.Add([]byte{}, int64(1), int64(0))
	buf := make([]byte, ctl.PieceHashBytes+ctl.MaxPieceBytes)
	f.Fuzz(func(t *testing.T, wire []byte, size, off int64) {
		if size < 0 || size > 1<<20 || off < 0 || off > size {
			return
		}
		var out bytes.Buffer
		st := &fileFetch{decision: testDecision, f: pkg.File{Path: "a/b", Size: size}, w: &out, off: off, sum: sha256.New(), buf: buf}
		open := func(context.Context) (io.ReadWriteCloser, error) { return fuzzStream{bytes.NewReader(wire)}, nil }
		err := st.once(context.Background(), open)
		if int64(out.Len()) != st.off-off || st.off > size {
			t.Fatalf("wrote %d bytes from %d to %d of %d", out.Len(), off, st.off, size)
		}
		if err == nil {
			if st.off != size {
				t.Fatalf("fetch ended at %d of %d without an error", st.off, size)
			}
			return
		}
		var fe *fetchError
		if !errors.As(err, &fe) {
			t.Fatalf("error %v is %T, not a fetch error", err, err)
		}
	})
}
