package mesh

import (
	"crypto/ed25519"
	"encoding/hex"
	"slices"
	"testing"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/identity"
)

// TestNodeRefsWithoutMesh: a node without a mesh resolves itself by
// "self", its id and its node.name, a configured peer's name by the id of
// its configured key, and nothing else; it has no peers to allowlist.
func TestNodeRefsWithoutMesh(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	peerID := identity.NodeID(pub)
	cfg := config.Default()
	cfg.Node.Name = "alpha"
	cfg.Mesh.Peers = []config.Peer{{Name: "gpu", Addr: "127.0.0.1:7401", Key: hex.EncodeToString(pub)}}
	r := NodeRefs{Self: "n-0123456789abcdef", Config: func() *config.Config { return cfg }}
	for _, tc := range []struct {
		ref, want string
		ok        bool
	}{
		{config.SelfRef, r.Self, true}, {r.Self, r.Self, true}, {"alpha", r.Self, true},
		{"gpu", peerID, true}, {peerID, peerID, true}, {"ghost", "ghost", false}, {"", "", false},
	} {
		if id, ok := r.Resolve(tc.ref); id != tc.want || ok != tc.ok {
			t.Errorf("Resolve(%q) = %q, %v; want %q, %v", tc.ref, id, ok, tc.want, tc.ok)
		}
	}
	if got := r.ResolveOrWritten("ghost"); got != "ghost" {
		t.Errorf("ResolveOrWritten(ghost) = %q", got)
	}
	if ids := r.PeerIDs([]string{"gpu"}); ids != nil {
		t.Errorf("PeerIDs without a mesh = %v", ids)
	}
	if k := r.Known(); k.SelfID != r.Self || len(k.Pinned) != 0 {
		t.Errorf("Known = %+v", k)
	}
	cfg.Inference.Roles = []config.Role{{Name: "chat", Expose: true, ServeTo: []string{"gpu"}}}
	if p := r.RolePolicies(cfg); len(p) != 1 || !p["chat"].Expose || p["chat"].ServeTo != nil {
		t.Errorf("RolePolicies without a mesh = %+v", p)
	}
	if n, p := r.PeerNames(), r.PinnedKeys(); len(n) != 0 || len(p) != 0 {
		t.Errorf("PeerNames %v, PinnedKeys %v without a mesh", n, p)
	}
}

// TestKnownNodesIn: config check's view of the data dir is this node's id
// from its key and no pins; an empty dir knows nothing.
func TestKnownNodesIn(t *testing.T) {
	dir := t.TempDir()
	if k := KnownNodesIn(dir); k.SelfID != "" || len(k.Pinned) != 0 {
		t.Fatalf("empty data dir: %+v", k)
	}
	id, _, err := identity.LoadOrGenerate(identity.KeyPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if k := KnownNodesIn(dir); k.SelfID != id.ID() || k.PinsErr != nil || !slices.Equal(keys(k.Pinned), nil) {
		t.Fatalf("KnownNodesIn = %+v, want self %s", k, id.ID())
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
