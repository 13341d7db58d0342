package meshproxy

import (
	"context"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/table"
)

// testKeepalive is the mesh keep-alive of test nodes: a dead peer is
// noticed after mesh.IdleTimeoutFactor times it.
const testKeepalive = 300 * time.Millisecond

type auditRec struct {
	source, kind string
	payload      any
}

type fakeAudit struct {
	mu   sync.Mutex // guards recs, keys
	recs []auditRec
	keys []chain.RecordKey
}

// Record chains every event, one entry each, so tests that count
// refusals see every one (the flood test uses a real chain.Recorder).
func (a *fakeAudit) Record(key chain.RecordKey, source string, payload any) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, auditRec{source, key.Kind, payload})
	a.keys = append(a.keys, key)
	return true, nil
}

func (a *fakeAudit) all() []auditRec {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]auditRec(nil), a.recs...)
}

// meshNode is one nodeld node in the test process: a meshtest node (its
// table admitting what its mesh admits), a Forwarder serving
// KindInfer and a proxy with role "chat" forwarding through it.
type meshNode struct {
	*meshtest.Node[*table.Table]
	t     testing.TB
	fwd   *Forwarder
	audit *fakeAudit
	h     *harness
	// proxyCfg is the config of n's proxy (role "chat" on a free port
	// when it names no role); set it before start.
	proxyCfg proxy.Config
	// holds, when set before start, is the proxy's Holds.
	holds proxy.Holds
	// wrapStreams, when set before start, wraps the mesh as the
	// forwarder's MeshStreams, so a test can see streams being opened.
	wrapStreams func(MeshStreams) MeshStreams

	fwdMu   sync.Mutex // guards fwdOf, for the mesh's event goroutine
	fwdOf   *Forwarder
	stopTCP func() // stops the forwarder's Run (TCP server); nil when none
}

// forwarder is n's current forwarder (nil before start).
func (n *meshNode) forwarder() *Forwarder {
	n.fwdMu.Lock()
	defer n.fwdMu.Unlock()
	return n.fwdOf
}

// testTransport is the transport of the test nodes' forwarders:
// NODELD_TEST_INFER_TRANSPORT (tcp or quic) runs the suite over one,
// else tcp, the default; tests of one transport set Deps.TCP themselves.
// make test runs the package over both.
func testTransport() string {
	if v := os.Getenv("NODELD_TEST_INFER_TRANSPORT"); v != "" {
		return v
	}
	return TransportTCP
}

// newMeshNodes makes nodes with identities and reserved UDP ports, so
// every node can be configured with the others' keys and addresses.
func newMeshNodes(t testing.TB, names ...string) []*meshNode {
	t.Helper()
	return newMeshNodesOpts(t, meshtest.Options{}, names...)
}

// newMeshNodesOpts is newMeshNodes with the nodes' meshtest options
// (Keepalive testKeepalive when unset).
func newMeshNodesOpts(t testing.TB, opts meshtest.Options, names ...string) []*meshNode {
	t.Helper()
	if opts.Keepalive == 0 {
		opts.Keepalive = testKeepalive
	}
	nodes := make([]*meshNode, len(names))
	for i, name := range names {
		n := &meshNode{t: t}
		o := opts
		if o.PeerEvents == nil {
			// As the daemon wires it: the forwarder hears of lost links.
			o.PeerEvents = func(ev table.PeerEvent) { n.forwarder().PeerEvent(ev) }
		}
		n.Node = meshtest.NewNode(t, name, o, admittingTable)
		nodes[i] = n
	}
	return nodes
}

// start runs n's mesh (admitting exactly peers, keys pinned), its
// forwarder and its proxy until the test ends. deps may set limits.
func (n *meshNode) start(deps Deps, peers ...*meshNode) {
	n.t.Helper()
	n.startPeers(deps, peerConfigs(peers)...)
}

// startPeers is start with the peer entries as given.
func (n *meshNode) startPeers(deps Deps, peers ...mesh.PeerConfig) {
	n.t.Helper()
	n.audit = &fakeAudit{}
	n.Build(peers...)
	lg := n.Logger
	deps.Mesh, deps.Table, deps.Logger, deps.Registerer = n.Mesh, n.Table, lg, n.Registry
	if n.wrapStreams != nil {
		deps.Mesh = n.wrapStreams(n.Mesh)
	}
	if deps.Recorder == nil {
		deps.Recorder = n.audit
	}
	if deps.TCP.Transport == "" && n.wrapStreams == nil {
		deps.TCP.Transport = testTransport()
	}
	if deps.TCP.Transport == TransportTCP {
		deps.TCP.Listen, deps.Identity = n.Listen, n.Ident
	}
	var err error
	n.fwd, err = NewForwarder(deps)
	if err != nil {
		n.t.Fatal(err)
	}
	n.fwdMu.Lock()
	n.fwdOf = n.fwd
	n.fwdMu.Unlock()
	n.Mesh.Handle(mesh.KindInfer, n.fwd.ServeStream)
	pdeps := proxy.Deps{Resolver: n.Table, Remote: n.fwd, Logger: lg, Registerer: n.Registry, Holds: n.holds}
	if t, ok := n.t.(*testing.T); ok {
		n.h = startProxy(t, n.proxyCfg, pdeps)
	} else {
		n.h = startProxyTB(n.t, pdeps)
	}
	n.Run()
	n.t.Cleanup(func() {
		n.stop()
		n.fwd.CloseIdleConnections()
	})
	if deps.TCP.Transport == TransportTCP {
		n.runTCP()
	}
}

// runTCP runs n's forwarder (its TCP server) and waits until it listens.
func (n *meshNode) runTCP() {
	n.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	fwd := n.fwd
	go func() { done <- fwd.Run(ctx) }()
	n.stopTCP = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			n.t.Errorf("forwarder %s: %v", n.Name, err)
		}
	})
	meshtest.WaitFor(n.t, n.Name+" serving inference on tcp", func() bool { return fwd.TCPAddr() != nil })
}

// admittingTable is a table admitting advertisements from the peers its
// node's mesh admits.
func admittingTable(id string, admit *meshtest.Admission) *table.Table {
	return table.New(id, table.Options{Admission: admit})
}

func peerConfigs(peers []*meshNode) []mesh.PeerConfig {
	var pcs []mesh.PeerConfig
	for _, p := range peers {
		pcs = append(pcs, p.Peer())
	}
	return pcs
}

// admitLater makes n, started without peers, admit peers once each of
// them has had its first dial to n refused: the link then comes from n's
// dial alone, never from two simultaneous dials that settle by closing
// one (which would fail a stream opened on the loser).
func (n *meshNode) admitLater(peers ...*meshNode) {
	n.t.Helper()
	var nodes []*meshtest.Node[*table.Table]
	for _, p := range peers {
		nodes = append(nodes, p.Node)
	}
	meshtest.AdmitLater(n.t, n.Node, nodes...)
}

// stop stops n's mesh (its peers see the link close) and its TCP server.
func (n *meshNode) stop() { n.Stop() }

// Stop stops n's mesh and then its TCP server, as a node stopping does.
func (n *meshNode) Stop() {
	n.Node.Stop()
	if n.stopTCP != nil {
		n.stopTCP()
	}
}

// Crash stops n as SIGKILL does: its mesh's socket first, then its TCP
// server (the kernel closes a killed node's connections).
func (n *meshNode) Crash() {
	n.Node.Crash()
	if n.stopTCP != nil {
		n.stopTCP()
	}
}

// serve registers base as n's "chat" instance serving model, exposed to
// the consumers.
func (n *meshNode) serve(base, model string, consumers ...*meshNode) {
	n.t.Helper()
	n.serveAs("llama.cpp", base, model, consumers...)
}

// serveAs is serve with the instance's runtime.
func (n *meshNode) serveAs(runtime, base, model string, consumers ...*meshNode) {
	n.t.Helper()
	if _, err := n.Table.RegisterLocal(table.OriginAdopted, "chat", base, model, "openai", runtime); err != nil {
		n.t.Fatal(err)
	}
	n.Table.ExposeToMesh("chat", true)
	for _, c := range consumers {
		n.Table.AllowMeshPeer("chat", c.ID(), true)
	}
}

// resolvesTo waits until n resolves "chat" to peer.
func (n *meshNode) resolvesTo(peer *meshNode) {
	n.t.Helper()
	meshtest.WaitFor(n.t, n.Name+" resolving chat to "+peer.Name, func() bool {
		tg, ok := n.Table.Resolve("chat")
		return ok && tg.Kind == table.TargetRemote && tg.NodeID == peer.ID()
	})
}

// startProxyTB runs a proxy with role "chat" for a benchmark: a harness
// whose t is nil (its helper methods are for tests only).
func startProxyTB(tb testing.TB, deps proxy.Deps) *harness {
	tb.Helper()
	deps.Logger = nil // benchmarks log nothing
	p, err := proxy.New(proxy.Config{Roles: []proxy.RoleConfig{{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 1024}}}, deps)
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
