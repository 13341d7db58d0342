package proxy

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/table"
)

// testKeepalive is the mesh keep-alive of test nodes: a dead peer is
// noticed after mesh.IdleTimeoutFactor times it.
const testKeepalive = 300 * time.Millisecond

// admitRef lets a table consult a mesh built after it.
type admitRef struct {
	mu sync.Mutex // guards m
	m  *mesh.Mesh
}

func (a *admitRef) set(m *mesh.Mesh) {
	a.mu.Lock()
	a.m = m
	a.mu.Unlock()
}

func (a *admitRef) IsAdmitted(id string) bool {
	a.mu.Lock()
	m := a.m
	a.mu.Unlock()
	return m != nil && m.IsAdmitted(id)
}

type auditRec struct {
	source, kind string
	payload      any
}

type fakeAudit struct {
	mu   sync.Mutex // guards recs
	recs []auditRec
}

func (a *fakeAudit) Record(source, kind string, payload any) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, auditRec{source, kind, payload})
	return nil
}

func (a *fakeAudit) all() []auditRec {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]auditRec(nil), a.recs...)
}

// meshNode is one nodeld node in the test process: identity, table, mesh
// on 127.0.0.1, a MeshForwarder serving KindInfer and a proxy with role
// "chat" forwarding through it.
type meshNode struct {
	t      testing.TB
	name   string
	ident  *identity.Identity
	listen string
	tbl    *table.Table
	admit  *admitRef
	m      *mesh.Mesh
	fwd    *MeshForwarder
	reg    *prometheus.Registry
	audit  *fakeAudit
	h      *harness
	cfg    mesh.Config
	cancel context.CancelFunc
	done   chan error
}

// newMeshNodes makes nodes with identities and reserved UDP ports, so
// every node can be configured with the others' keys and addresses.
func newMeshNodes(t testing.TB, names ...string) []*meshNode {
	t.Helper()
	nodes := make([]*meshNode, len(names))
	for i, name := range names {
		id, err := identity.Generate(filepath.Join(t.TempDir(), identity.KeyFileName))
		if err != nil {
			t.Fatal(err)
		}
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen := pc.LocalAddr().String()
		_ = pc.Close() // the port is only reserved; the mesh binds it
		n := &meshNode{t: t, name: name, ident: id, listen: listen, admit: &admitRef{}}
		n.tbl = table.New(id.ID(), table.Options{Admission: n.admit})
		nodes[i] = n
	}
	return nodes
}

func (n *meshNode) id() string { return n.ident.ID() }

// start runs n's mesh (admitting exactly peers, keys pinned), its
// forwarder and its proxy until the test ends. deps may set limits.
func (n *meshNode) start(deps MeshDeps, peers ...*meshNode) {
	n.t.Helper()
	n.reg = prometheus.NewRegistry()
	n.audit = &fakeAudit{}
	n.cfg = mesh.Config{Listen: n.listen, Keepalive: testKeepalive, Peers: peerConfigs(peers)}
	lg := zaptest.NewLogger(n.t).Named(n.name)
	m, err := mesh.New(n.cfg, mesh.Deps{
		Identity: n.ident, DataDir: n.t.TempDir(), Table: n.tbl, Logger: lg, Registerer: n.reg,
	})
	if err != nil {
		n.t.Fatal(err)
	}
	n.m = m
	n.admit.set(m)
	deps.Mesh, deps.Table, deps.Audit, deps.Logger, deps.Registerer = m, n.tbl, n.audit, lg, n.reg
	n.fwd, err = NewMeshForwarder(deps)
	if err != nil {
		n.t.Fatal(err)
	}
	m.Handle(mesh.KindInfer, n.fwd.ServeStream)
	pdeps := Deps{Resolver: n.tbl, Remote: n.fwd, Logger: lg, Registerer: n.reg}
	if t, ok := n.t.(*testing.T); ok {
		n.h = startProxy(t, Config{}, pdeps)
	} else {
		n.h = startProxyTB(n.t, pdeps)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.done = make(chan error, 1)
	go func() { n.done <- m.Run(ctx) }()
	select {
	case <-m.Ready():
	case err := <-n.done:
		n.t.Fatalf("mesh %s: %v", n.name, err)
	case <-time.After(testDeadline):
		n.t.Fatalf("mesh %s not ready", n.name)
	}
	n.t.Cleanup(func() {
		n.stop()
		n.fwd.CloseIdleConnections()
	})
}

func peerConfigs(peers []*meshNode) []mesh.PeerConfig {
	var pcs []mesh.PeerConfig
	for _, p := range peers {
		pcs = append(pcs, mesh.PeerConfig{Name: p.name, Addr: p.listen, Key: p.ident.PublicKeyHex(), Tier: mesh.TierPaired})
	}
	return pcs
}

// admitLater makes n, started without peers, admit peers once each of
// them has had its first dial to n refused: the link then comes from n's
// dial alone, never from two simultaneous dials that settle by closing
// one (which would fail a stream opened on the loser).
func (n *meshNode) admitLater(peers ...*meshNode) {
	n.t.Helper()
	for _, p := range peers {
		waitFor(n.t, p.name+" refused by "+n.name, func() bool {
			for _, st := range p.m.Status() {
				if st.Addr == n.listen && st.LastError != "" {
					return true
				}
			}
			return false
		})
	}
	n.cfg.Peers = peerConfigs(peers)
	if err := n.m.ApplyConfig(n.cfg); err != nil {
		n.t.Fatal(err)
	}
	for _, p := range peers {
		p.linked(n)
		n.linked(p)
	}
}

// stop stops n's mesh (its peers see the link close).
func (n *meshNode) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	select {
	case err := <-n.done:
		if err != nil {
			n.t.Errorf("mesh %s: %v", n.name, err)
		}
	case <-time.After(testDeadline):
		n.t.Errorf("mesh %s did not stop", n.name)
	}
}

// serve registers base as n's "chat" instance serving model, exposed to
// the consumers.
func (n *meshNode) serve(base, model string, consumers ...*meshNode) {
	n.t.Helper()
	if err := n.tbl.RegisterLocal("chat", base, model, "openai", "llama.cpp"); err != nil {
		n.t.Fatal(err)
	}
	n.tbl.ExposeToMesh("chat", true)
	for _, c := range consumers {
		n.tbl.AllowMeshPeer("chat", c.id(), true)
	}
}

// waitFor polls cond until it holds, failing the test at testDeadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(testDeadline)
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

// resolvesTo waits until n resolves "chat" to peer.
func (n *meshNode) resolvesTo(peer *meshNode) {
	n.t.Helper()
	waitFor(n.t, n.name+" resolving chat to "+peer.name, func() bool {
		tg, ok := n.tbl.Resolve("chat")
		return ok && tg.Kind == table.TargetRemote && tg.NodeID == peer.id()
	})
}

// linked waits until n has a live link to peer.
func (n *meshNode) linked(peer *meshNode) {
	n.t.Helper()
	waitFor(n.t, n.name+" linked to "+peer.name, func() bool {
		for _, st := range n.m.Status() {
			if st.ID == peer.id() && st.State == mesh.StateConnected {
				return true
			}
		}
		return false
	})
}

// startProxyTB runs a proxy with role "chat" for a benchmark: a harness
// whose t is nil (its helper methods are for tests only).
func startProxyTB(tb testing.TB, deps Deps) *harness {
	tb.Helper()
	deps.Logger = nil // benchmarks log nothing
	p, err := New(Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 1024}}}, deps)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-p.Ready():
	case err := <-done:
		cancel()
		tb.Fatalf("Run: %v", err)
	}
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, DisableCompression: true}
	tb.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		<-done
	})
	return &harness{p: p, client: &http.Client{Transport: tr}, done: done}
}
