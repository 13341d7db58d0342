package dispatch

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/table"
)

const waitTimeout = 15 * time.Second

// startMesh runs a mesh node with a new identity until the test ends.
func startMesh(t testing.TB, name string) *meshNode {
	t.Helper()
	n := meshtest.NewNode(t, name, meshtest.Options{}, plainTable)
	n.Start()
	return n
}

// farHost is the test side of a workload host: a ctl server on a mesh
// node whose handler the test sets.
type farHost struct {
	node   *meshNode
	server *ctl.Server
	// drop, when set, makes the host read the request and reset the stream
	// without answering.
	mu      sync.Mutex
	handler ctl.Handler
	drop    bool
}

func newFarHost(t testing.TB, node *meshNode, controllers ...ed25519.PublicKey) *farHost {
	t.Helper()
	h := &farHost{node: node}
	v, err := ctl.NewVerifier(ctl.VerifierConfig{Self: node.Ident.PublicKey(), Controllers: controllers})
	if err != nil {
		t.Fatal(err)
	}
	h.server, err = ctl.NewServer(ctl.ServerConfig{Verifier: v, Key: node.Ident.PrivateKey(),
		Handler: func(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
			h.mu.Lock()
			fn := h.handler
			h.mu.Unlock()
			if fn == nil {
				return nil, ctl.NewRefusal(ctl.CodeUnknownMethod, "no handler")
			}
			return fn(ctx, req)
		}})
	if err != nil {
		t.Fatal(err)
	}
	node.Mesh.Handle(mesh.KindCtl, func(ctx context.Context, peer mesh.PeerInfo, s *mesh.Stream) {
		h.mu.Lock()
		drop := h.drop
		h.mu.Unlock()
		if drop {
			_, _ = ctl.ReadMessage(s, ctl.MaxRequestBytes)
			s.Reset(mesh.StreamCodeCancelled)
			return
		}
		_, _ = h.server.Serve(ctx, s, peer.Key)
	})
	return h
}

func (h *farHost) set(fn ctl.Handler) {
	h.mu.Lock()
	h.handler = fn
	h.mu.Unlock()
}

func (h *farHost) setDrop(drop bool) {
	h.mu.Lock()
	h.drop = drop
	h.mu.Unlock()
}

// fetched is what a test fetcher received.
type fetched struct {
	header  ctl.FetchHeader
	data    []byte
	refusal *ctl.ArtifactRefusal
}

// fetchFrom runs the host side of the artifact protocol on rw: one fetch
// request, then the answer, checking every piece's hash.
func fetchFrom(rw io.ReadWriter, req ctl.FetchRequest) (fetched, error) {
	b, _ := json.Marshal(req)
	if err := mesh.WriteFrame(rw, ctl.FrameFetch, b); err != nil {
		return fetched{}, fmt.Errorf("write fetch: %w", err)
	}
	return readFetched(rw)
}

// readFetched reads the answer to one fetch request from r.
func readFetched(r io.Reader) (fetched, error) {
	var out fetched
	sawHeader := false
	for {
		typ, p, err := mesh.ReadFrame(r, mesh.MaxFrameSize)
		if err != nil {
			return out, fmt.Errorf("read frame: %w", err)
		}
		switch typ {
		case ctl.FrameRefusal:
			out.refusal = &ctl.ArtifactRefusal{}
			if err := json.Unmarshal(p, out.refusal); err != nil {
				return out, err
			}
			return out, nil
		case ctl.FrameHeader:
			if sawHeader {
				return out, errors.New("second header")
			}
			sawHeader = true
			if err := json.Unmarshal(p, &out.header); err != nil {
				return out, err
			}
		case ctl.FramePiece:
			if !sawHeader || len(p) < sha256.Size || len(p)-sha256.Size > ctl.MaxPieceBytes {
				return out, fmt.Errorf("bad data frame of %d bytes", len(p))
			}
			sum := sha256.Sum256(p[sha256.Size:])
			if !bytes.Equal(sum[:], p[:sha256.Size]) {
				return out, errors.New("piece hash mismatch")
			}
			out.data = append(out.data, p[sha256.Size:]...)
		case ctl.FrameEnd:
			if int64(len(out.data)) != out.header.Size-out.header.Offset {
				return out, fmt.Errorf("got %d bytes, header says %d", len(out.data), out.header.Size-out.header.Offset)
			}
			return out, nil
		default:
			return out, fmt.Errorf("frame type %d", typ)
		}
	}
}

// fetchOverMesh opens an artifact stream from far to the caller node.
func fetchOverMesh(ctx context.Context, far *meshNode, caller string, req ctl.FetchRequest) (fetched, error) {
	s, err := far.Mesh.OpenStream(ctx, caller, mesh.KindArtifact)
	if err != nil {
		return fetched{}, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	return fetchFrom(s, req)
}

func openChain(t testing.TB, ident *identity.Identity) *chain.Chain {
	t.Helper()
	c, _, err := chain.Open(filepath.Join(t.TempDir(), "chain.log"), ident.PrivateKey(), chain.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newDispatcher(t testing.TB, ident *identity.Identity, m Mesh, local LocalHost) *Dispatcher {
	t.Helper()
	var lg = zaptest.NewLogger(t)
	if _, ok := t.(*testing.B); ok {
		lg = nil
	}
	d, err := New(Deps{Identity: ident, Mesh: m, Chain: openChain(t, ident), Local: local,
		Logger: lg, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// makePackage writes and signs a package with the given files in a new
// directory and returns it.
func makePackage(t testing.TB, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := pkg.Manifest{
		ID: "echo", Version: "1.0.0", Kind: pkg.KindService,
		Runtime:  pkg.Runtime{Type: grammar.RuntimeProcess, Command: "bin/echo"},
		Variants: []pkg.Variant{{Name: "default"}, {Name: "big"}},
	}
	if _, err := pkg.Build(dir, m); err != nil {
		t.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := pkg.Sign(dir, key); err != nil {
		t.Fatal(err)
	}
	return dir
}

// randomBytes returns n deterministic pseudo-random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	var ctr [8]byte
	for i := 0; i < n; i += sha256.Size {
		ctr[0], ctr[1], ctr[2] = byte(i), byte(i>>8), byte(i>>16)
		sum := sha256.Sum256(ctr[:])
		copy(b[i:], sum[:])
	}
	return b
}

// meshNode is a mesh node whose table admits no advertisements.
type meshNode = meshtest.Node[*table.Table]

func plainTable(id string, _ *meshtest.Admission) *table.Table {
	return table.New(id, table.Options{})
}

// verifyLocal verifies dir as the operator's Place does (anchors: the
// package's own signers; no revocations), for tests that offer a package
// directly.
func verifyLocal(ctx context.Context, dir string) (*pkg.Verified, error) {
	anchors, err := ownSigners(dir)
	if err != nil {
		return nil, err
	}
	return pkg.VerifyDirContext(ctx, dir, anchors, nil)
}
