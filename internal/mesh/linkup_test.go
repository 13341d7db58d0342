package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/table"
)

// linkUpNode is a mesh started with an OnLinkUp hook (set up here rather
// than in the shared helpers).
type linkUpNode struct {
	ident *identity.Identity
	m     *Mesh
	done  chan error
}

func startLinkUpNode(t *testing.T, hook func(context.Context, PeerInfo)) *linkUpNode {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(key)
	if err != nil {
		t.Fatal(err)
	}
	tbl := table.New(id.ID(), table.Options{})
	m, err := New(Config{Listen: "127.0.0.1:0", Keepalive: time.Second}, Deps{
		Identity: id, DataDir: t.TempDir(), Table: tbl, PeerEvents: tbl.ApplyPeerEvent,
		Logger: zaptest.NewLogger(t), OnLinkUp: hook,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := &linkUpNode{ident: id, m: m, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { n.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-n.done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	select {
	case <-m.Ready():
	case <-time.After(waitTimeout):
		t.Fatal("mesh not ready")
	}
	return n
}

func (n *linkUpNode) peerCfg() PeerConfig {
	return PeerConfig{Name: "p", Addr: n.m.Addr().String(), Key: n.ident.PublicKeyHex(), Tier: TierPaired}
}

func TestOnLinkUpAndNoticeKind(t *testing.T) {
	// A dial can be adopted and then refused by the other side, so the
	// hook may run for a short-lived link too: every call is counted, and
	// every call's context must end with its link.
	var mu sync.Mutex
	var ups []string
	running := 0
	a := startLinkUpNode(t, func(ctx context.Context, p PeerInfo) {
		mu.Lock()
		ups = append(ups, p.ID)
		running++
		mu.Unlock()
		<-ctx.Done()
		mu.Lock()
		running--
		mu.Unlock()
	})
	got := make(chan string, 1)
	a.m.Handle(KindNotice, func(ctx context.Context, peer PeerInfo, s *Stream) {
		defer s.CloseWrite()
		_, p, err := ReadFrame(s, 64)
		if err == nil {
			got <- string(p)
		}
	})
	b := startLinkUpNode(t, nil)
	// One dial only (b's): a's first dial is refused by b, which does not
	// know a yet, and a backs off while b dials.
	if err := a.m.ApplyConfig(Config{Listen: a.m.cfg.Listen, Keepalive: time.Second, Peers: []PeerConfig{b.peerCfg()}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b refusing a", func() bool { st := a.m.Status(); return len(st) == 1 && st[0].LastError != "" })
	if err := b.m.ApplyConfig(Config{Listen: b.m.cfg.Listen, Keepalive: time.Second, Peers: []PeerConfig{a.peerCfg()}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a linked to b", func() bool { p := a.m.LinkedPeers(); return len(p) == 1 && p[0].ID == b.ident.ID() })
	waitFor(t, "b linked to a", func() bool { return len(b.m.LinkedPeers()) == 1 })
	waitFor(t, "OnLinkUp for the link", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running == 1
	})
	mu.Lock()
	for _, id := range ups {
		if id != b.ident.ID() {
			t.Errorf("OnLinkUp peer = %s, want %s", id, b.ident.ID())
		}
	}
	mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := b.m.OpenStream(ctx, a.ident.ID(), KindNotice)
	if err != nil {
		t.Fatalf("open notice stream: %v", err)
	}
	if err := WriteFrame(s, 1, []byte("n")); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseWrite()
	select {
	case p := <-got:
		if p != "n" {
			t.Fatalf("notice frame = %q", p)
		}
	case <-ctx.Done():
		t.Fatal("notice stream not served")
	}
	if KindNotice.String() != "notice" {
		t.Fatalf("KindNotice.String() = %q", KindNotice.String())
	}

	// Removing the peer ends the link and the hook's context.
	if err := a.m.ApplyConfig(Config{Listen: a.m.cfg.Listen, Keepalive: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "OnLinkUp context ended with the link", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running == 0
	})
}
