package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/operator"
)

// reconfigure writes cfg as the node's config and reloads it (as SIGHUP
// does); the reload must be accepted. The next tick applies the targets.
func (mn *mnode) reconfigure(cfg string) {
	t := mn.m.t
	t.Helper()
	if err := os.WriteFile(mn.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := mn.n.reloader.Reload(); err != nil {
		t.Fatalf("reload of %s refused: %v", mn.name, err)
	}
}

// tierOf is the tier A's controller gives node id, "" when it is no
// target.
func (mn *mnode) tierOf(id string) string {
	v, ok := mn.view(id)
	if !ok {
		return ""
	}
	return v.Tier.String()
}

// TestMeshtest_9_6_TierFollowsConfig: A runs a controller and a host of
// its own (the self target, pinned). B listed paired is learned and
// chosen; dropped from mesh.peers it is demoted to discovered but still
// known (it holds a placement), and A's own host is untouched; a refresh
// keeps the demoted tier; listed again as paired it is raised; listed as
// discovered it is demoted.
func TestMeshtest_9_6_TierFollowsConfig(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b")
	hostA := "host:\n  enabled: true\n  trust_anchors: [" + anchor + "]\n" + binReadable()
	cfgA := func(peers ...peer) string { return m.config("a", peers, hostA+meshController(anchor, "")) }
	m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor)))
	a := m.start("a", cfgA(peer{name: "b", tier: "paired"}))
	idA, idB := m.id("a"), m.id("b")
	a.waitAlive(idA, idB)
	if got := a.tierOf(idB); got != engine.TrustPaired.String() {
		t.Fatalf("B listed paired: tier %q", got)
	}
	res, rc, errOut := a.placeJSON("--avoid", "self", pkgDir)
	if rc != 0 || res.Node != idB {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	self := func() {
		t.Helper()
		v, ok := a.view(idA)
		if !ok || !v.Self || v.Tier != engine.TrustPinned {
			t.Fatalf("A's own host: %+v (known %v)", v, ok)
		}
	}

	a.reconfigure(cfgA())
	a.tick()
	if got := a.tierOf(idB); got != engine.TrustDiscovered.String() {
		t.Fatalf("B dropped: tier %q, want discovered (still known)", got)
	}
	self()
	a.n.ctrl.Refresh()
	a.tick()
	if got := a.tierOf(idB); got != engine.TrustDiscovered.String() {
		t.Fatalf("B after a refresh: tier %q, want discovered", got)
	}

	a.reconfigure(cfgA(peer{name: "b", tier: "paired"}))
	a.tick()
	if got := a.tierOf(idB); got != engine.TrustPaired.String() {
		t.Fatalf("B listed again: tier %q, want paired", got)
	}
	self()

	a.reconfigure(cfgA(peer{name: "b", tier: "discovered"}))
	a.tick()
	if got := a.tierOf(idB); got != engine.TrustDiscovered.String() {
		t.Fatalf("B listed discovered: tier %q", got)
	}
	self()
	// Discovered is below the policy's floor: nothing new goes to B.
	if res, rc, _ := a.placeJSON("--dry-run", "--avoid", "self", pkgDir); rc != 0 || res.Node == idB {
		t.Fatalf("dry run with B discovered = %d %+v", rc, res)
	}
}

// TestMeshtest_9_6_DiscoveredRaisedUnreachableReported: B listed as
// discovered is a target below the policy's paired floor, so a place has
// no node; listed again as paired it is raised and chosen. C is listed
// paired but nothing answers at its address: it is reported as not alive
// and without facts, and never chosen.
func TestMeshtest_9_6_DiscoveredRaisedUnreachableReported(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b", "c")
	cfgA := func(tierB string) string {
		return m.config("a", []peer{{name: "b", tier: tierB}, {name: "c", tier: "paired"}}, meshController(anchor, ""))
	}
	m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor)))
	a := m.start("a", cfgA("discovered"))
	idB, idC := m.id("b"), m.id("c")
	a.waitAlive(idB)
	if got := a.tierOf(idB); got != engine.TrustDiscovered.String() {
		t.Fatalf("B: tier %q, want discovered", got)
	}
	if res, rc, _ := a.placeJSON(pkgDir); rc != 1 || res.Outcome != operator.CodeUnplaceable || len(res.Attempts) != 0 {
		t.Fatalf("place with B discovered = %d %+v", rc, res)
	}
	a.reconfigure(cfgA("paired"))
	a.tick()
	if got := a.tierOf(idB); got != engine.TrustPaired.String() {
		t.Fatalf("B relisted: tier %q, want paired", got)
	}
	res, rc, errOut := a.placeJSON(pkgDir)
	if rc != 0 || res.Node != idB {
		t.Fatalf("place with B paired = %d %+v\n%s", rc, res, errOut)
	}
	var nodes []operator.NodeDoc
	ctlJSON(t, a.socket(), &nodes, "nodes")
	var sawC bool
	for _, n := range nodes {
		if n.ID == idC {
			sawC = true
			if n.Liveness == engine.Alive.String() || n.HasFacts {
				t.Fatalf("unreachable C reported as %+v", n)
			}
		}
	}
	if !sawC {
		t.Fatalf("C is not reported: %+v", nodes)
	}
}

// TestMeshtest_9_6_OtherKeyAtListedAddress: A lists B's key; at B's
// address answers a node with another key. It never inherits B's tier
// and is never learned (no target under its id; the link is refused and
// chained); naming it by its address or its id in a place is refused
// (no admitted peer by that name or id): in nodeld only mesh.peers
// entries are targets, so a request cannot make one, not even
// discovered.
func TestMeshtest_9_6_OtherKeyAtListedAddress(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b")
	listed := m.id("b")
	cfgA := m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, ""))
	// B's data dir gets another key before it first starts.
	b := m.node("b")
	if err := os.RemoveAll(b.dataDir); err != nil {
		t.Fatal(err)
	}
	b.key = makeKey(t, b.dataDir)
	other := m.id("b")
	m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor)))
	a := m.start("a", cfgA)
	waitFor(t, "A to refuse the other key at B's address", func() bool {
		a.tick()
		return len(a.find(mesh.KindPeerRefused, map[string]any{"key": b.key})) > 0
	})
	if v, ok := a.view(listed); !ok || v.Liveness == engine.Alive || v.HasFacts || v.Tier != engine.TrustPaired {
		t.Fatalf("the listed key's target: %+v (known %v)", v, ok)
	}
	if _, ok := a.view(other); ok {
		t.Fatal("the other key became a target")
	}
	for _, ref := range []string{b.relay.Addr(), other} {
		_, rc, errOut := a.placeJSON(ref, pkgDir)
		if rc != 3 || !strings.Contains(errOut, "no admitted peer by that name or id") {
			t.Fatalf("place pinned to %s = %d %q, want unknown node", ref, rc, errOut)
		}
	}
}

// TestMeshtest_9_6_PinnedKeyReflash: B is listed with its key and holds a
// placement. The operator lists B's next key (B is about to be
// reflashed) while the old B still answers: the new key is not learned
// (the old node's key is refused), and the old node, no longer listed, is
// demoted to discovered. After the reflash the new key is learned at the
// address, paired, and chosen.
func TestMeshtest_9_6_PinnedKeyReflash(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b")
	b := m.node("b")
	oldKey, oldID := b.key, m.id("b")
	nextDir := filepath.Join(m.root, "b-next")
	nextKey := makeKey(t, nextDir)
	pub, err := identity.ParsePublicKeyHex(nextKey)
	if err != nil {
		t.Fatal(err)
	}
	nextID := identity.NodeID(pub)

	cfgB := m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor))
	m.start("b", cfgB)
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	a.waitAlive(oldID)
	if res, rc, errOut := a.placeJSON(pkgDir); rc != 0 || res.Node != oldID {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}

	// The config now names the next key; the old node still answers.
	b.key = nextKey
	a.reconfigure(m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	waitFor(t, "A to refuse the old key at B's address", func() bool {
		a.tick()
		return len(a.find(mesh.KindPeerRefused, map[string]any{"key": oldKey})) > 0
	})
	if got := a.tierOf(oldID); got != engine.TrustDiscovered.String() {
		t.Fatalf("the old node: tier %q, want discovered", got)
	}
	if v, ok := a.view(nextID); !ok || v.Tier != engine.TrustPaired || v.Liveness == engine.Alive || v.HasFacts {
		t.Fatalf("the next key before the reflash: %+v (known %v)", v, ok)
	}

	// Reflash: B comes back with the next key in a fresh data dir.
	b.kill()
	if err := os.RemoveAll(b.dataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(nextDir, b.dataDir); err != nil {
		t.Fatal(err)
	}
	b.run()
	a.waitAlive(nextID)
	if got := a.tierOf(nextID); got != engine.TrustPaired.String() {
		t.Fatalf("the reflashed node: tier %q, want paired", got)
	}
	res, rc, errOut := a.placeJSON(pkgDir)
	if rc != 0 || res.Node != nextID {
		t.Fatalf("place after the reflash = %d %+v\n%s", rc, res, errOut)
	}
}
