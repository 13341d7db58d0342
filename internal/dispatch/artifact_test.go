package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
)

const (
	testTarget  = "n-00000000000000aa"
	otherPeer   = "n-00000000000000bb"
	testDecided = "1111111111111111111111111111111111111111111111111111111111111111"
)

// serveOnPipe runs ServeArtifact for peer on one end of a pipe and the
// test fetcher with req on the other.
func serveOnPipe(t *testing.T, d *Dispatcher, peer string, req ctl.FetchRequest) fetched {
	t.Helper()
	got, err := serveRaw(t, d, peer, func(c net.Conn) (fetched, error) { return fetchFrom(c, req) })
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	return got
}

func serveRaw(t *testing.T, d *Dispatcher, peer string, client func(net.Conn) (fetched, error)) (fetched, error) {
	t.Helper()
	ours, theirs := net.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		defer theirs.Close()
		_ = d.ServeArtifact(ctx, peer, theirs)
	})
	_ = ours.SetDeadline(time.Now().Add(waitTimeout))
	got, err := client(ours)
	ours.Close()
	wg.Wait()
	return got, err
}

// offered returns a dispatcher offering a fresh package to testTarget
// under testDecided, with its directory.
func offered(t *testing.T, files map[string][]byte) (*Dispatcher, string, func()) {
	t.Helper()
	d := newDispatcher(t, meshtest.NewIdentity(t), nil, nil)
	dir := makePackage(t, files)
	v, err := verifyLocal(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	release, err := d.offers.add(testDecided, testTarget, v, OfferGrace)
	if err != nil {
		t.Fatal(err)
	}
	return d, dir, release
}

func TestServeArtifactRefusals(t *testing.T) {
	d, dir, _ := offered(t, map[string][]byte{"bin/echo": []byte("#!/bin/sh\n"), "data/a.bin": []byte("abc")})
	// A symbolic link where a listed directory was: nothing behind it is
	// served, even inside the package.
	if err := os.Rename(filepath.Join(dir, "data"), filepath.Join(dir, "real")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		peer string
		req  ctl.FetchRequest
		want string
	}{
		{"unknown decision", testTarget, ctl.FetchRequest{V: 1, DecisionID: strings.Repeat("2", 64), Path: "bin/echo"}, ctl.ArtifactNotOffered},
		{"another peer", otherPeer, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "bin/echo"}, ctl.ArtifactNotOffered},
		{"unlisted path", testTarget, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "bin/other"}, ctl.ArtifactNotListed},
		{"manifest", testTarget, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "manifest.sig"}, ctl.ArtifactNotListed},
		{"escape", testTarget, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "../../etc/passwd"}, ctl.ArtifactNotListed},
		{"offset past the end", testTarget, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "bin/echo", Offset: 11}, ctl.ArtifactBadRequest},
		{"negative offset", testTarget, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "bin/echo", Offset: -1}, ctl.ArtifactBadRequest},
		{"version", testTarget, ctl.FetchRequest{V: 2, DecisionID: testDecided, Path: "bin/echo"}, ctl.ArtifactBadRequest},
		{"malformed decision", testTarget, ctl.FetchRequest{V: 1, DecisionID: "ABC", Path: "bin/echo"}, ctl.ArtifactBadRequest},
		{"symlinked directory", testTarget, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "data/a.bin"}, ctl.ArtifactIO},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := serveOnPipe(t, d, tt.peer, tt.req)
			if got.refusal == nil || got.refusal.Code != tt.want {
				t.Fatalf("got %+v, want refusal %s", got, tt.want)
			}
			if got.data != nil {
				t.Fatal("data sent with a refusal")
			}
		})
	}
}

func TestServeArtifactChangedFile(t *testing.T) {
	d, dir, _ := offered(t, map[string][]byte{"bin/echo": []byte("#!/bin/sh\n")})
	if err := os.WriteFile(filepath.Join(dir, "bin/echo"), []byte("longer than listed"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := serveOnPipe(t, d, testTarget, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "bin/echo"})
	if got.refusal == nil || got.refusal.Code != ctl.ArtifactIO {
		t.Fatalf("got %+v, want io refusal", got)
	}
}

func TestServeArtifactMalformedFrames(t *testing.T) {
	d, _, _ := offered(t, map[string][]byte{"bin/echo": []byte("x")})
	tests := []struct {
		name    string
		typ     mesh.FrameType
		payload []byte
	}{
		{"wrong frame type", ctl.FramePiece, []byte(`{}`)},
		{"not json", ctl.FrameFetch, []byte(`{`)},
		{"unknown field", ctl.FrameFetch, []byte(`{"v":1,"decision_id":"` + testDecided + `","path":"bin/echo","offset":0,"x":1}`)},
		{"trailing data", ctl.FrameFetch, []byte(`{"v":1,"decision_id":"` + testDecided + `","path":"bin/echo","offset":0} {}`)},
		{"too large", ctl.FrameFetch, bytes.Repeat([]byte(" "), ctl.MaxArtifactControlBytes+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := serveRaw(t, d, testTarget, func(c net.Conn) (fetched, error) {
				var wg sync.WaitGroup
				defer wg.Wait()
				// The server may answer before reading a large frame whole.
				wg.Go(func() { _ = mesh.WriteFrame(c, tt.typ, tt.payload) })
				typ, p, err := mesh.ReadFrame(c, mesh.MaxFrameSize)
				if err != nil {
					return fetched{}, err
				}
				c.Close()
				if typ != ctl.FrameRefusal {
					return fetched{}, errors.New("not a refusal")
				}
				var r ctl.ArtifactRefusal
				err = json.Unmarshal(p, &r)
				return fetched{refusal: &r}, err
			})
			if err != nil || got.refusal.Code != ctl.ArtifactBadRequest {
				t.Fatalf("got %+v %v, want bad_request", got.refusal, err)
			}
		})
	}
}

func TestServeArtifactPieces(t *testing.T) {
	data := randomBytes(2*ctl.MaxPieceBytes + 5)
	d, _, _ := offered(t, map[string][]byte{"bin/echo": []byte("x"), "model.bin": data})
	var sizes []int
	_, err := serveRaw(t, d, testTarget, func(c net.Conn) (fetched, error) {
		b, _ := json.Marshal(ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "model.bin", Offset: 3})
		if err := mesh.WriteFrame(c, ctl.FrameFetch, b); err != nil {
			return fetched{}, err
		}
		for {
			typ, p, err := mesh.ReadFrame(c, mesh.MaxFrameSize)
			if err != nil {
				return fetched{}, err
			}
			switch typ {
			case ctl.FrameHeader:
				if string(p) != `{"size":1048581,"offset":3}` {
					t.Errorf("header %s", p)
				}
			case ctl.FramePiece:
				sizes = append(sizes, len(p)-32)
			case ctl.FrameEnd:
				return fetched{}, nil
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{ctl.MaxPieceBytes, ctl.MaxPieceBytes, 2}, sizes); diff != "" {
		t.Fatalf("piece sizes (-want +got):\n%s", diff)
	}
	// The pieces reassemble to the file, each passing its hash check.
	got := serveOnPipe(t, d, testTarget, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "model.bin"})
	if !bytes.Equal(got.data, data) {
		t.Fatal("data differs")
	}
}

func TestOfferGrace(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	o := newOffers(clock)
	v, err := verifyLocal(context.Background(), makePackage(t, map[string][]byte{"bin/echo": []byte("x")}))
	if err != nil {
		t.Fatal(err)
	}
	release, err := o.add(testDecided, testTarget, v, OfferGrace)
	if err != nil {
		t.Fatal(err)
	}
	advance(time.Hour)
	if _, ok := o.lookup(testDecided, testTarget); !ok {
		t.Fatal("a live offer expired")
	}
	release()
	release() // idempotent
	advance(OfferGrace - time.Second)
	if _, ok := o.lookup(testDecided, testTarget); !ok {
		t.Fatal("offer dropped inside its grace")
	}
	advance(time.Second)
	if _, ok := o.lookup(testDecided, testTarget); ok || o.len() != 0 {
		t.Fatal("offer kept after its grace")
	}
	for i := range MaxOffers {
		id := strings.Repeat("0", 60) + strings.Repeat("f", 4)
		id = id[:60] + string("0123456789abcdef"[i%16]) + string("0123456789abcdef"[i/16%16]) + "00"
		if _, err := o.add(id, testTarget, v, OfferGrace); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := o.add(testDecided, testTarget, v, OfferGrace); !errors.Is(err, ErrTooManyOffers) {
		t.Fatalf("err = %v, want ErrTooManyOffers", err)
	}
}
