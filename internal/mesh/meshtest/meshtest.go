package meshtest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/table"
	"github.com/nodeld/nodeld/internal/testport"
)

// WaitTimeout bounds every wait of this package: a node getting ready or
// stopping, and WaitFor.
const WaitTimeout = 20 * time.Second

// DefaultKeepalive is the mesh keep-alive of a node whose Options set none.
const DefaultKeepalive = time.Second

// WaitFor polls cond every few milliseconds until it holds, failing the
// test after WaitTimeout with what in the message.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.NewTimer(WaitTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			tb.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// NewIdentity returns a fresh in-memory node identity.
func NewIdentity(tb testing.TB) *identity.Identity {
	tb.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	id, err := identity.New(priv)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// FreeUDP reserves a port of 127.0.0.1 free for UDP and for TCP (a node
// serves inference on TCP beside its mesh's UDP port) until tb ends, and
// returns its address; the caller's mesh binds it. The port comes from
// internal/testport, below the kernel's ephemeral range: a port asked of
// the kernel and closed again could be handed to another test's socket
// (a proxy's role port) before the node binds it.
func FreeUDP(tb testing.TB) string {
	tb.Helper()
	return testport.Addr(tb)
}

// Options shape a Node. The zero value is a node with a new identity and
// DefaultKeepalive.
type Options struct {
	// Identity is the node's identity; nil makes a new one.
	Identity *identity.Identity
	// Keepalive is the mesh keep-alive; zero means DefaultKeepalive.
	Keepalive time.Duration
	// Audit, when set, is the mesh's auditor.
	Audit mesh.Auditor
	// Recorder, when set, is the mesh's recorder of refused handshakes.
	Recorder mesh.Recorder
	// RestartLinkWait, when positive, is the mesh's wait for a peer that
	// restarted (mesh.Deps.RestartLinkWait); zero means
	// mesh.RestartLinkWait.
	RestartLinkWait time.Duration
	// PeerEvents, when set, is told every peer event after the table
	// (as the daemon tells its inference forwarder).
	PeerEvents func(table.PeerEvent)
}

// NewTable makes a node's table from its id. admit reports, once the
// node's mesh is built, whether that mesh admits a node; a table that
// should admit advertisements from admitted peers consults it.
type NewTable[T mesh.AdvertTable] func(id string, admit *Admission) T

// Node is one in-process nodeld node: identity, data dir, table (of the
// caller's type T) and mesh.
type Node[T mesh.AdvertTable] struct {
	// Name names the node in logs, wait messages and peer entries.
	Name string
	// Ident is the node's identity.
	Ident *identity.Identity
	// Dir is the mesh's data directory.
	Dir string
	// Listen is the reserved address the mesh binds.
	Listen string
	// Table is the node's routing table.
	Table T
	// Mesh is set by Build.
	Mesh *mesh.Mesh
	// Registry receives the mesh's metrics; set by Build.
	Registry *prometheus.Registry
	// Logger is the node's test logger, named Name.
	Logger *zap.Logger
	// Config is the mesh config last built or applied.
	Config mesh.Config

	tb     testing.TB
	audit  mesh.Auditor
	rec    mesh.Recorder
	wait   time.Duration // mesh.Deps.RestartLinkWait
	events func(table.PeerEvent)
	admit  *Admission
	cancel context.CancelFunc
	done   chan error
	sock   atomic.Pointer[net.UDPConn] // the running mesh's socket
}

// Admission lets a table consult a mesh built after it.
type Admission struct {
	mu sync.Mutex // guards m
	m  *mesh.Mesh
}

func (a *Admission) set(m *mesh.Mesh) {
	a.mu.Lock()
	a.m = m
	a.mu.Unlock()
}

// IsAdmitted reports whether the node's mesh, once built, admits id.
func (a *Admission) IsAdmitted(id string) bool {
	a.mu.Lock()
	m := a.m
	a.mu.Unlock()
	return m != nil && m.IsAdmitted(id)
}

// NewNode makes a node with its identity, data dir, reserved port and
// the table newTable makes; Build makes its mesh and Run runs it.
func NewNode[T mesh.AdvertTable](tb testing.TB, name string, opts Options, newTable NewTable[T]) *Node[T] {
	tb.Helper()
	id := opts.Identity
	if id == nil {
		id = NewIdentity(tb)
	}
	keepalive := opts.Keepalive
	if keepalive == 0 {
		keepalive = DefaultKeepalive
	}
	n := &Node[T]{Name: name, Ident: id, Dir: tb.TempDir(), Listen: FreeUDP(tb),
		Logger: zaptest.NewLogger(tb).Named(name), tb: tb, audit: opts.Audit, rec: opts.Recorder,
		wait: opts.RestartLinkWait, events: opts.PeerEvents}
	n.Config = mesh.Config{Listen: n.Listen, Keepalive: keepalive}
	n.admit = &Admission{}
	n.Table = newTable(id.ID(), n.admit)
	return n
}

// ID is the node's id.
func (n *Node[T]) ID() string { return n.Ident.ID() }

// Peer is n as a paired peer entry with its key pinned.
func (n *Node[T]) Peer() mesh.PeerConfig {
	return mesh.PeerConfig{Name: n.Name, Addr: n.Listen, Key: n.Ident.PublicKeyHex(), Tier: mesh.TierPaired}
}

// Peers are the nodes as pinned peer entries.
func Peers[T mesh.AdvertTable](nodes ...*Node[T]) []mesh.PeerConfig {
	var pcs []mesh.PeerConfig
	for _, p := range nodes {
		pcs = append(pcs, p.Peer())
	}
	return pcs
}

// Build makes n's mesh, admitting peers, without running it, so that a
// test can register stream handlers first.
func (n *Node[T]) Build(peers ...mesh.PeerConfig) {
	n.tb.Helper()
	n.Registry = prometheus.NewRegistry()
	n.Config.Peers = peers
	// A table that takes what the mesh reports (the real one does) gets
	// it, as the daemon wires it; a fake that only advertises gets
	// nothing.
	events := func(table.PeerEvent) {}
	if sink, ok := any(n.Table).(interface{ ApplyPeerEvent(table.PeerEvent) }); ok {
		events = sink.ApplyPeerEvent
	}
	if extra := n.events; extra != nil {
		first := events
		events = func(ev table.PeerEvent) { first(ev); extra(ev) }
	}
	m, err := mesh.New(n.Config, mesh.Deps{Identity: n.Ident, DataDir: n.Dir, Table: n.Table, PeerEvents: events,
		Audit: n.audit, Recorder: n.rec, Logger: n.Logger, Registerer: n.Registry,
		RestartLinkWait: n.wait,
		ListenUDP: func(addr *net.UDPAddr) (*net.UDPConn, error) {
			uc, err := net.ListenUDP("udp", addr)
			if err == nil {
				n.sock.Store(uc)
			}
			return uc, err
		}})
	if err != nil {
		n.tb.Fatal(err)
	}
	n.Mesh = m
	n.admit.set(m)
}

// Run runs n's built mesh until Stop or the end of the test, and waits
// until it is ready.
func (n *Node[T]) Run() {
	n.tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	m := n.Mesh
	go func() { n.done <- m.Run(ctx) }()
	n.tb.Cleanup(n.Stop)
	select {
	case <-m.Ready():
	case err := <-n.done:
		n.cancel = nil
		n.tb.Fatalf("mesh %s: %v", n.Name, err)
	case <-time.After(WaitTimeout):
		n.tb.Fatalf("mesh %s not ready", n.Name)
	}
}

// Start builds n's mesh admitting peers and runs it.
func (n *Node[T]) Start(peers ...mesh.PeerConfig) {
	n.tb.Helper()
	n.Build(peers...)
	n.Run()
}

// Stop stops n's mesh and waits for its Run to return; its peers see the
// link close. It does nothing when the mesh is not running.
func (n *Node[T]) Stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	select {
	case err := <-n.done:
		if err != nil {
			n.tb.Errorf("mesh %s: %v", n.Name, err)
		}
	case <-time.After(WaitTimeout):
		n.tb.Errorf("mesh %s did not stop", n.Name)
	}
}

// Crash stops n's mesh the way SIGKILL stops a node: its socket closes
// first, so its peers are told nothing and keep their links to this run
// until a packet they send draws a stateless reset from the node's next
// run on the same key and address (or their liveness timeout passes).
func (n *Node[T]) Crash() {
	if uc := n.sock.Load(); uc != nil {
		_ = uc.Close()
	}
	n.Stop()
}

// Apply makes peers the running mesh's peers.
func (n *Node[T]) Apply(peers ...mesh.PeerConfig) {
	n.tb.Helper()
	n.Config.Peers = peers
	if err := n.Mesh.ApplyConfig(n.Config); err != nil {
		n.tb.Fatal(err)
	}
}

// Connected reports whether n has a live link to peer.
func (n *Node[T]) Connected(peer *Node[T]) bool {
	for _, st := range n.Mesh.Status() {
		if st.ID == peer.ID() && st.State == mesh.StateConnected {
			return true
		}
	}
	return false
}

// RefusedBy reports whether n's dial to peer's address has failed.
func (n *Node[T]) RefusedBy(peer *Node[T]) bool {
	for _, st := range n.Mesh.Status() {
		if st.Addr == peer.Listen && st.LastError != "" {
			return true
		}
	}
	return false
}

// WaitLinked waits until a and b both have a live link to the other.
func WaitLinked[T mesh.AdvertTable](tb testing.TB, a, b *Node[T]) {
	tb.Helper()
	WaitFor(tb, a.Name+" linked to "+b.Name, func() bool { return a.Connected(b) })
	WaitFor(tb, b.Name+" linked to "+a.Name, func() bool { return b.Connected(a) })
}

// AdmitLater makes n, running without peers, admit peers once each of
// them (already configured with n) has had its first dial to n refused,
// and waits for the links: each then comes from n's dial alone.
func AdmitLater[T mesh.AdvertTable](tb testing.TB, n *Node[T], peers ...*Node[T]) {
	tb.Helper()
	for _, p := range peers {
		WaitFor(tb, p.Name+" refused by "+n.Name, func() bool { return p.RefusedBy(n) })
	}
	n.Apply(Peers(peers...)...)
	for _, p := range peers {
		WaitLinked(tb, p, n)
	}
}

// Pin configures running a and b as each other's pinned peers, a first,
// so that only b's dial makes the link, and waits until both see it.
func Pin[T mesh.AdvertTable](tb testing.TB, a, b *Node[T]) {
	tb.Helper()
	a.Apply(b.Peer())
	AdmitLater(tb, b, a)
}
