package plane

import (
	"crypto/ed25519"
	"encoding/hex"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane/planetest"
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

// TestNewFromConfigRefreshDemotesHoldingTargets: a controller made from
// the node's config takes its peers as targets at their configured tier;
// a peer removed from mesh.peers by a reload stays a target, demoted to
// discovered, while a placement names it, and one that holds nothing
// goes. A reload whose anchors do not parse is refused and changes
// nothing.
func TestNewFromConfigRefreshDemotesHoldingTargets(t *testing.T) {
	clk := planetest.NewClock(t0)
	cl := newCluster(clk)
	hs := []*planetest.Host{cl.AddNode(t, 1, 16), cl.AddNode(t, 2, 8)}
	cl.AddPackage("/pkg/echo", "echo", pkg.KindService, 1)
	dir, ch, _ := testChain(t, clk)
	peer := func(name string, h *planetest.Host) config.Peer {
		return config.Peer{Name: name, Addr: "127.0.0.1:" + name, Key: hex.EncodeToString(h.Key.Public().(ed25519.PublicKey)), Tier: config.TierPaired}
	}
	cfg := config.Default()
	cfg.Controller.Policy.Kinds = map[string]config.KindRule{pkg.KindService: {MinTier: config.TierPaired}}
	cfg.Mesh.Peers = []config.Peer{peer("a", hs[0]), peer("b", hs[1])}
	var inForce atomic.Pointer[config.Config]
	inForce.Store(cfg)
	var anchored atomic.Int32
	src := Source{
		Config: inForce.Load, Self: testIdentity(t, 9),
		Pinned:     func() map[string]string { return map[string]string{} },
		SetAnchors: func(pkg.Anchors) { anchored.Add(1) },
	}
	c, err := NewFromConfig(cfg, src, Deps{Now: clk.Now, Chain: ch, Dispatcher: cl, StatePath: filepath.Join(dir, StateFile)})
	if err != nil {
		t.Fatal(err)
	}
	tiers := func() map[string]engine.Trust {
		m := map[string]engine.Trust{}
		for _, n := range c.Nodes() {
			m[n.ID] = n.Tier
		}
		return m
	}
	if got := tiers(); len(got) != 2 || got[hs[0].ID] != engine.TrustPaired || got[hs[1].ID] != engine.TrustPaired {
		t.Fatalf("targets %v, want a and b paired", got)
	}
	if err := c.Tick(t.Context()); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Place(t.Context(), echo)
	if err != nil || rep.Placed == nil {
		t.Fatalf("place: %v, %+v", err, rep)
	}
	held := rep.Placed.Node

	bad := *cfg
	bad.Controller.TrustAnchors = []string{"not hex"}
	if _, err := c.PrepareReload(&bad); err == nil {
		t.Fatal("a reload with a bad anchor prepared")
	}

	next := *cfg
	next.Mesh.Peers = nil
	p, err := c.PrepareReload(&next)
	if err != nil {
		t.Fatal(err)
	}
	inForce.Store(&next)
	p.Commit()
	if anchored.Load() != 1 {
		t.Errorf("anchors put in force %d times, want once (the commit)", anchored.Load())
	}
	if err := c.Tick(t.Context()); err != nil { // applies what Refresh handed over
		t.Fatal(err)
	}
	if got := tiers(); len(got) != 1 || got[held] != engine.TrustDiscovered {
		t.Fatalf("after the reload: targets %v, want %s alone, discovered (it holds a placement)", got, held)
	}
}
