package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
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
	m, err := New(Config{Listen: "127.0.0.1:0", Keepalive: time.Second}, Deps{
		Identity: id, DataDir: t.TempDir(), Table: table.New(id.ID(), table.Options{}),
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
	ups := make(chan PeerInfo, 4)
	ended := make(chan string, 4)
	a := startLinkUpNode(t, func(ctx context.Context, p PeerInfo) {
		ups <- p
		<-ctx.Done()
		ended <- p.ID
	})
	got := make(chan string, 1)
	a.m.Handle(KindNotice, func(ctx context.Context, peer PeerInfo, s *quic.Stream) {
		defer s.Close()
		_, p, err := ReadFrame(s, 64)
		if err == nil {
			got <- string(p)
		}
	})
	b := startLinkUpNode(t, nil)
	if err := a.m.ApplyConfig(Config{Listen: a.m.cfg.Listen, Keepalive: time.Second, Peers: []PeerConfig{b.peerCfg()}}); err != nil {
		t.Fatal(err)
	}
	if err := b.m.ApplyConfig(Config{Listen: b.m.cfg.Listen, Keepalive: time.Second, Peers: []PeerConfig{a.peerCfg()}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(waitTimeout)
	select {
	case p := <-ups:
		if p.ID != b.ident.ID() || !p.Key.Equal(b.ident.PublicKey()) {
			t.Fatalf("OnLinkUp peer = %s, want %s", p.ID, b.ident.ID())
		}
	case <-deadline:
		t.Fatal("OnLinkUp not called")
	}
	if peers := a.m.LinkedPeers(); len(peers) != 1 || peers[0].ID != b.ident.ID() {
		t.Fatalf("LinkedPeers = %+v", peers)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var s *quic.Stream
	for {
		var err error
		if s, err = b.m.OpenStream(ctx, a.ident.ID(), KindNotice); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("open notice stream: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := WriteFrame(s, 1, []byte("n")); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	select {
	case p := <-got:
		if p != "n" {
			t.Fatalf("notice frame = %q", p)
		}
	case <-deadline:
		t.Fatal("notice stream not served")
	}
	if KindNotice.String() != "notice" {
		t.Fatalf("KindNotice.String() = %q", KindNotice.String())
	}

	// Removing the peer ends the link and the hook's context.
	if err := a.m.ApplyConfig(Config{Listen: a.m.cfg.Listen, Keepalive: time.Second}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ended:
		if id != b.ident.ID() {
			t.Fatalf("ended for %s", id)
		}
	case <-deadline:
		t.Fatal("OnLinkUp context did not end with the link")
	}
}
