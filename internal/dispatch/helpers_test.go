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
	"github.com/quic-go/quic-go"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/table"
)

const waitTimeout = 15 * time.Second

func newIdentity(t testing.TB) *identity.Identity {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(priv)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// meshNode is one running mesh node with its own identity and table.
type meshNode struct {
	t      testing.TB
	name   string
	ident  *identity.Identity
	m      *mesh.Mesh
	cancel context.CancelFunc
	done   chan error
}

func startMesh(t testing.TB, name string, ident *identity.Identity) *meshNode {
	t.Helper()
	tbl := table.New(ident.ID(), table.Options{})
	m, err := mesh.New(mesh.Config{Listen: "127.0.0.1:0", Keepalive: time.Second}, mesh.Deps{
		Identity: ident, DataDir: t.TempDir(), Table: tbl,
		Logger: zaptest.NewLogger(t).Named(name),
	})
	if err != nil {
		t.Fatal(err)
	}
	n := &meshNode{t: t, name: name, ident: ident, m: m, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- m.Run(ctx) }()
	select {
	case <-m.Ready():
	case err := <-n.done:
		t.Fatalf("run %s: %v", name, err)
	case <-time.After(waitTimeout):
		t.Fatalf("%s not ready", name)
	}
	t.Cleanup(n.stop)
	return n
}

func (n *meshNode) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	select {
	case err := <-n.done:
		if err != nil {
			n.t.Errorf("run %s: %v", n.name, err)
		}
	case <-time.After(waitTimeout):
		n.t.Errorf("run %s did not return", n.name)
	}
}

func (n *meshNode) peerConfig() mesh.PeerConfig {
	return mesh.PeerConfig{Name: n.name, Addr: n.m.Addr().String(), Key: n.ident.PublicKeyHex(), Tier: mesh.TierPaired}
}

func (n *meshNode) connected(peer *meshNode) bool {
	for _, st := range n.m.Status() {
		if st.ID == peer.ident.ID() && st.State == mesh.StateConnected {
			return true
		}
	}
	return false
}

// link configures a and b as each other's pinned peers, one side after
// the other so that only b's dial makes a link (a's first dial is refused
// by b, which does not know a yet, and a then backs off), and waits until
// both see it. Configuring both at once would race two links, one of
// which the mesh closes as a duplicate, with streams on it.
func link(t testing.TB, a, b *meshNode) {
	t.Helper()
	apply := func(n, peer *meshNode) {
		if err := n.m.ApplyConfig(mesh.Config{Listen: "127.0.0.1:0", Keepalive: time.Second,
			Peers: []mesh.PeerConfig{peer.peerConfig()}}); err != nil {
			t.Fatal(err)
		}
	}
	apply(a, b)
	waitFor(t, "b refusing a", func() bool {
		for _, st := range a.m.Status() {
			if st.LastError != "" {
				return true
			}
		}
		return false
	})
	apply(b, a)
	waitFor(t, "link", func() bool { return a.connected(b) && b.connected(a) })
}

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
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
	v, err := ctl.NewVerifier(ctl.VerifierConfig{Self: node.ident.PublicKey(), Controllers: controllers})
	if err != nil {
		t.Fatal(err)
	}
	h.server, err = ctl.NewServer(ctl.ServerConfig{Verifier: v, Key: node.ident.PrivateKey(),
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
	node.m.Handle(mesh.KindCtl, func(ctx context.Context, peer mesh.PeerInfo, s *quic.Stream) {
		h.mu.Lock()
		drop := h.drop
		h.mu.Unlock()
		if drop {
			_, _ = ctl.ReadMessage(s, ctl.MaxRequestBytes)
			s.CancelRead(mesh.StreamCodeCancelled)
			s.CancelWrite(mesh.StreamCodeCancelled)
			return
		}
		_, _ = h.server.Serve(ctx, &quicStream{s: s}, peer.Key)
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
	var out fetched
	sawHeader := false
	for {
		typ, p, err := mesh.ReadFrame(rw, mesh.MaxFrameSize)
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
	s, err := far.m.OpenStream(ctx, caller, mesh.KindArtifact)
	if err != nil {
		return fetched{}, err
	}
	defer func() {
		s.CancelRead(mesh.StreamCodeCancelled)
		_ = s.Close()
	}()
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
		Runtime:  pkg.Runtime{Type: pkg.RuntimeProcess, Command: "bin/echo"},
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
