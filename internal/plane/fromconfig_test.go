package plane

import (
	"crypto/ed25519"
	"testing"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/identity"
)

func testIdentity(t *testing.T, seed byte) *identity.Identity {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	s[0] = seed
	id, err := identity.New(ed25519.NewKeyFromSeed(s))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// This node is a target only when its host is enabled, and then as
// itself (tier pinned); a mesh.peers entry with its own key does not make
// it one.
func TestConfiguredTargetsSelfOnlyWithHostEnabled(t *testing.T) {
	self, peer := testIdentity(t, 1), testIdentity(t, 2)
	cfg := &config.Config{}
	cfg.Mesh.Peers = []config.Peer{
		{Name: "me", Addr: "127.0.0.1:1", Key: self.PublicKeyHex(), Tier: config.TierPinned},
		{Name: "b", Addr: "127.0.0.1:2", Tier: config.TierPaired}, // pinned on first contact
	}
	pinned := map[string]string{"127.0.0.1:2": peer.PublicKeyHex()}
	ts := TargetsOf(cfg, self, pinned)
	if len(ts) != 1 || ts[0].ID != peer.ID() || ts[0].Self || ts[0].Tier != engine.TrustPaired {
		t.Fatalf("host disabled: targets %+v, want peer b alone (paired)", ts)
	}
	cfg.Host.Enabled = true
	ts = TargetsOf(cfg, self, pinned)
	if len(ts) != 2 || ts[0].ID != self.ID() || !ts[0].Self || ts[0].Tier != engine.TrustPinned || ts[1].ID != peer.ID() {
		t.Fatalf("host enabled: targets %+v, want this node (pinned, self) and b", ts)
	}
	if ts := TargetsOf(cfg, self, nil); len(ts) != 1 || !ts[0].Self {
		t.Fatalf("no mesh: targets %+v, want this node alone", ts)
	}
	cfg.Host.Enabled = false
	if ts := TargetsOf(cfg, self, nil); len(ts) != 0 {
		t.Fatalf("no mesh, host disabled: targets %+v, want none", ts)
	}
}

// TestControllerConfigAllowEmulated: a declared workload's allow_emulated
// reaches the plane's workload (and so its orders).
func TestControllerConfigAllowEmulated(t *testing.T) {
	cfg := config.Default()
	cfg.Controller.Workloads = []config.Workload{{Name: "a", Package: "p", Replicas: 1}, {Name: "b", Package: "p", Replicas: 1, AllowEmulated: true}}
	ws := ConfigOf(cfg, nil).Workloads
	if len(ws) != 2 || ws[0].AllowEmulated || !ws[1].AllowEmulated {
		t.Fatalf("plane workloads %+v, want a without and b with AllowEmulated", ws)
	}
}
