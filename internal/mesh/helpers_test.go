package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/table"
)

const waitTimeout = 15 * time.Second

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

type auditRec struct {
	source, kind string
	payload      any
}

type fakeAudit struct {
	mu   sync.Mutex
	recs []auditRec
	keys []chain.RecordKey
}

func (a *fakeAudit) Record(source, kind string, payload any) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, auditRec{source, kind, payload})
	return nil
}

// recorder is a Recorder that chains every event into a, keeping its key.
func (a *fakeAudit) recorder() Recorder { return auditRecorder{a} }

type auditRecorder struct{ a *fakeAudit }

func (r auditRecorder) Record(key chain.RecordKey, source string, payload any) (bool, error) {
	r.a.mu.Lock()
	r.a.keys = append(r.a.keys, key)
	r.a.mu.Unlock()
	return true, r.a.Record(source, key.Kind, payload)
}

// recordKeys returns the keys of the events recorded through recorder.
func (a *fakeAudit) recordKeys() []chain.RecordKey {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]chain.RecordKey(nil), a.keys...)
}

func (a *fakeAudit) ofKind(kind string) []any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []any
	for _, r := range a.recs {
		if r.kind == kind {
			out = append(out, r.payload)
		}
	}
	return out
}

// admitRef lets the table consult a mesh built after it.
type admitRef struct {
	mu sync.Mutex
	m  *Mesh
}

func (a *admitRef) set(m *Mesh) {
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

type testNode struct {
	t      testing.TB
	name   string
	ident  *identity.Identity
	dir    string
	listen string
	tbl    *table.Table
	admit  *admitRef
	m      *Mesh
	reg    *prometheus.Registry
	audit  *fakeAudit
	cancel context.CancelFunc
	done   chan error
	// peersChanged counts OnPeersChanged calls.
	peersChanged atomic.Int64
	// keepalive and liveness override the test defaults (1 s, the
	// package default) when set before start.
	keepalive, liveness time.Duration
	// maxStreams is Config.MaxStreams when set before start.
	maxStreams int
	// advTable, when set before start, is the mesh's table instead of
	// tbl (which it should wrap).
	advTable AdvertTable
	// onStopped and restartWait, when set before start, are
	// Deps.OnPeerStopped and Deps.RestartLinkWait.
	onStopped   func(peer string)
	restartWait time.Duration
	// events, when set before start, consumes the mesh's peer events
	// instead of tbl.ApplyPeerEvent.
	events func(table.PeerEvent)
}

func (n *testNode) config(peers []PeerConfig) Config {
	ka := n.keepalive
	if ka == 0 {
		ka = time.Second
	}
	return Config{Listen: n.listen, Keepalive: ka, LivenessTimeout: n.liveness, Peers: peers, MaxStreams: n.maxStreams}
}

// newNode builds a node with its own identity, data dir and table; start
// runs it.
func newNode(t testing.TB, name string) *testNode {
	t.Helper()
	n := &testNode{t: t, name: name, ident: newIdentity(t), dir: t.TempDir(), listen: "127.0.0.1:0", admit: &admitRef{}}
	n.tbl = table.New(n.ident.ID(), table.Options{Admission: n.admit})
	return n
}

func (n *testNode) start(peers ...PeerConfig) {
	n.t.Helper()
	n.reg = prometheus.NewRegistry()
	n.audit = &fakeAudit{}
	var tbl AdvertTable = n.tbl
	if n.advTable != nil {
		tbl = n.advTable
	}
	events := n.events
	if events == nil {
		events = n.tbl.ApplyPeerEvent
	}
	m, err := New(n.config(peers), Deps{
		Identity: n.ident, DataDir: n.dir, Table: tbl, PeerEvents: events, Audit: n.audit, Recorder: n.audit.recorder(),
		Logger: zaptest.NewLogger(n.t).Named(n.name), Registerer: n.reg,
		OnPeersChanged: func() { n.peersChanged.Add(1) },
		OnPeerStopped:  n.onStopped, RestartLinkWait: n.restartWait,
	})
	if err != nil {
		n.t.Fatal(err)
	}
	n.m = m
	n.admit.set(m)
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.done = make(chan error, 1)
	go func() { n.done <- m.Run(ctx) }()
	select {
	case <-m.Ready():
	case err := <-n.done:
		n.t.Fatalf("run %s: %v", n.name, err)
	case <-time.After(waitTimeout):
		n.t.Fatalf("%s not ready", n.name)
	}
	n.listen = m.Addr().String() // a restart binds the same port
	n.t.Cleanup(n.stop)
}

func (n *testNode) stop() {
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

func (n *testNode) id() string { return n.ident.ID() }

// peer is n as a peer entry, with its key pinned when pinned is true.
func (n *testNode) peer(pinned bool) PeerConfig {
	pc := PeerConfig{Name: n.name, Addr: n.listen, Tier: TierPaired}
	if pinned {
		pc.Key = n.ident.PublicKeyHex()
	}
	return pc
}

func (n *testNode) apply(peers ...PeerConfig) {
	n.t.Helper()
	cfg := n.config(peers)
	cfg.Listen = n.m.cfg.Listen
	if err := n.m.ApplyConfig(cfg); err != nil {
		n.t.Fatal(err)
	}
}

func (n *testNode) state(addr string) PeerStatus {
	for _, st := range n.m.Status() {
		if st.Addr == addr {
			return st
		}
	}
	return PeerStatus{}
}

func (n *testNode) link(peerID string) *link {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	if p := n.m.peerByIDLocked(peerID); p != nil {
		return p.link
	}
	return nil
}

// serveChat registers and exposes role on n for peer.
func (n *testNode) serveChat(role, peer string) {
	n.t.Helper()
	if _, err := n.tbl.RegisterLocal(table.OriginAdopted, role, "http://127.0.0.1:8080", "m", "openai", "openai"); err != nil {
		n.t.Fatal(err)
	}
	n.tbl.ExposeToMesh(role, true)
	n.tbl.AllowMeshPeer(role, peer, true)
}

func (n *testNode) resolvesRemote(role, node string) bool {
	tg, ok := n.tbl.Resolve(role)
	return ok && tg.Kind == table.TargetRemote && tg.NodeID == node
}

// pair starts a and b linked with pinned keys, by one dial (b's): a's
// first dial is refused by b, which does not know a yet, and a then backs
// off while b dials.
func pair(t testing.TB) (*testNode, *testNode) {
	t.Helper()
	a, b := newNode(t, "a"), newNode(t, "b")
	a.start()
	b.start()
	a.apply(b.peer(true))
	waitFor(t, "b refusing a", func() bool { return a.state(b.listen).LastError != "" })
	b.apply(a.peer(true))
	waitFor(t, "link a-b", func() bool { return linked(a, b) })
	return a, b
}

// linked reports whether a and b hold the same link.
func linked(a, b *testNode) bool {
	la, lb := a.link(b.id()), b.link(a.id())
	return la != nil && lb != nil && la.dialer == lb.dialer && la.outbound != lb.outbound
}
