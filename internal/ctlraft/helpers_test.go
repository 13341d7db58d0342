package ctlraft

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/plane/planetest"
	"github.com/nodeld/nodeld/internal/raftmesh"
	"github.com/nodeld/nodeld/internal/table"
)

// testKeepalive is the mesh keep-alive of test nodes.
const testKeepalive = 300 * time.Millisecond

// waitBound bounds every wait for the cluster (a leader, a catch-up)
// under -race on a shared 2-core host.
const waitBound = 20 * time.Second

// fakeHosts is planetest's cluster as the controllers' Dispatcher.
type fakeHosts struct{ *planetest.Cluster }

type fakePkg struct{ v *pkg.Verified }

func (p fakePkg) Verified() *pkg.Verified { return p.v }

func (f *fakeHosts) Describe(ctx context.Context, node string) (plane.Description, error) {
	d, err := f.Cluster.Describe(ctx, node)
	return plane.Description(d), err
}

func (f *fakeHosts) VerifyPackage(ctx context.Context, dir string) (plane.Package, error) {
	v, err := f.Cluster.VerifyPackage(ctx, dir)
	if err != nil {
		return nil, err
	}
	return fakePkg{v}, nil
}

func (f *fakeHosts) PlaceDecided(ctx context.Context, node string, p plane.Package, variant string, cfg ctl.InstanceConfig, start bool, decisionID string) (ctl.PlaceResult, error) {
	return f.Cluster.PlaceDecided(ctx, node, p.Verified(), variant, cfg, start, decisionID)
}

// loopbackRaft tunes raft for controllers on one host (harness.tune): a
// follower stands for election after half of raftmesh.HeartbeatTimeout
// without the leader (and a leader steps down as soon), and a commit
// reaches the followers within 10 ms, so a leader's kill costs about
// half what the LAN timeouts make it cost. The election itself keeps
// raftmesh.ElectionTimeout: a shorter one livelocked pre-votes when the
// shared test machine slowed the RPCs down. What a kill tests (no
// acknowledged place lost, none placed twice) does not depend on them.
func loopbackRaft(c *raft.Config) {
	c.HeartbeatTimeout = raftmesh.HeartbeatTimeout / 2
	c.LeaderLeaseTimeout = raftmesh.LeaderLeaseTimeout / 2
	c.CommitTimeout = 10 * time.Millisecond
}

// harness is three (or n) controllers, each a real mesh on 127.0.0.1
// with raft on its layer, a Store and a plane.Controller on it, placing
// on one planetest cluster of hosts.
type harness struct {
	t       testing.TB
	clk     *planetest.Clock
	hosts   *fakeHosts
	targets []plane.Target
	cfg     plane.Config
	ctls    []*ctlNode
	// mu guards each ctlNode's c, store and down, which kill and
	// restart change while a placer reads them.
	mu sync.Mutex
	// tune changes each store's raft config.
	tune func(*raft.Config)
}

// ctlNode is one controller.
type ctlNode struct {
	*meshtest.Node[*table.Table]
	h         *harness
	statePath string
	layer     *raftmesh.Layer
	store     *Store
	c         *plane.Controller
	ch        *chain.Chain
	reg       *prometheus.Registry
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	down      bool
	// voters, when set, are the store's voters (else every controller);
	// join starts the store with Config.Join.
	voters []string
	join   bool
	// bootWait is the store's Deps.FirstBootWait (-1 when zero: a new
	// cluster starts at once); held keeps h.start from starting its
	// controller.
	bootWait time.Duration
	held     bool
}

func admittingTable(id string, admit *meshtest.Admission) *table.Table {
	return table.New(id, table.Options{Admission: admit})
}

// newHarness makes n controllers and hosts hosts of 24 GiB each, with
// package echo (a service that reserves no memory, so hosts take any number).
func newHarness(t testing.TB, n, hosts int) *harness {
	t.Helper()
	clk := planetest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	h := &harness{t: t, clk: clk, hosts: &fakeHosts{planetest.NewCluster(clk)}}
	for i := range hosts {
		hs := h.hosts.AddNode(t, byte(i+1), 24)
		h.targets = append(h.targets, plane.Target{ID: hs.ID, Key: hs.Key.Public().(ed25519.PublicKey), Tier: engine.TrustPaired})
	}
	slices.SortFunc(h.targets, func(a, b plane.Target) int { return strings.Compare(a.ID, b.ID) })
	h.hosts.AddPackage("/pkg/echo", "echo", pkg.KindService, 0)
	h.cfg = plane.Default()
	h.cfg.Policy.Kinds = map[string]plane.KindRule{pkg.KindService: {MinTier: engine.TrustPaired}}
	for i := range n {
		name := string(rune('a' + i))
		h.ctls = append(h.ctls, &ctlNode{h: h, Node: meshtest.NewNode(t, name, meshtest.Options{Keepalive: testKeepalive}, admittingTable)})
	}
	return h
}

func (h *harness) voters() []string {
	var out []string
	for _, n := range h.ctls {
		out = append(out, n.ID())
	}
	return out
}

// start starts every controller's mesh, links them pairwise, then runs
// each one's store and controller.
func (h *harness) start() {
	h.t.Helper()
	for i, n := range h.ctls {
		var pcs []mesh.PeerConfig
		for _, p := range h.ctls[:i] {
			pcs = append(pcs, p.Peer())
		}
		n.startMesh(pcs...)
	}
	for i, n := range h.ctls {
		later := h.ctls[i+1:]
		for _, p := range later {
			meshtest.WaitFor(h.t, p.Name+" refused by "+n.Name, func() bool { return p.RefusedBy(n.Node) })
		}
		n.Apply(h.peersOf(n)...)
		for _, p := range later {
			meshtest.WaitLinked(h.t, n.Node, p.Node)
		}
	}
	for _, n := range h.ctls {
		if !n.held {
			n.startController()
		}
	}
}

func (h *harness) peersOf(n *ctlNode) []mesh.PeerConfig {
	var all []mesh.PeerConfig
	for _, p := range h.ctls {
		if p != n {
			all = append(all, p.Peer())
		}
	}
	return all
}

// startMesh builds and runs n's mesh admitting peers, with its raft
// layer serving KindRaft.
func (n *ctlNode) startMesh(peers ...mesh.PeerConfig) {
	t := n.h.t
	t.Helper()
	n.Build(peers...)
	l, err := raftmesh.New(raftmesh.Config{Voters: n.h.voters()}, raftmesh.Deps{Mesh: n.Mesh, Self: n.ID(), Logger: n.Logger, Registerer: n.Registry})
	if err != nil {
		t.Fatal(err)
	}
	n.layer = l
	n.Mesh.Handle(mesh.KindRaft, l.ServeStream)
	n.Run()
}

// startController opens n's chain and runs its store and controller.
func (n *ctlNode) startController() {
	t := n.h.t
	t.Helper()
	if n.statePath == "" {
		n.statePath = filepath.Join(n.Dir, "controller.json")
	}
	ck := ed25519.NewKeyFromSeed(append([]byte{byte(n.Name[0])}, make([]byte, 31)...))
	ch, _, err := chain.Open(filepath.Join(n.Dir, "chain.log"), ck, chain.Options{Now: n.h.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	n.ch = ch
	n.reg = prometheus.NewRegistry()
	voters := n.voters
	if voters == nil {
		voters = n.h.voters()
	}
	wait := n.bootWait
	if wait == 0 {
		wait = -1
	}
	st, err := New(Config{Self: n.ID(), Voters: voters, Dir: filepath.Join(n.Dir, "raft"), ImportPath: n.statePath, Join: n.join},
		Deps{Layer: n.layer, Logger: n.Logger, Registerer: n.reg, Tune: n.h.tune, FirstBootWait: wait})
	if err != nil {
		t.Fatal(err)
	}
	c, err := plane.New(n.h.cfg, n.h.targets, plane.Deps{Now: n.h.clk.Now, Chain: ch, Dispatcher: n.h.hosts,
		State: st, Leadership: st, Logger: n.Logger})
	if err != nil {
		t.Fatal(err)
	}
	n.h.mu.Lock()
	n.c, n.store, n.down = c, st, false
	n.h.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		if err := st.Run(ctx); err != nil {
			t.Errorf("store %s: %v", n.Name, err)
		}
	}()
	go func() {
		defer n.wg.Done()
		_ = c.Run(ctx)
	}()
	t.Cleanup(n.stop)
}

// stop ends n's controller and store (raft shut down, stores closed)
// and closes its layer and chain; its mesh stays (kill stops it).
func (n *ctlNode) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.wg.Wait()
	n.cancel = nil
	_ = n.layer.Close()
	_ = n.ch.Close()
}

// kill stops n as kill -9 would: its mesh socket closes first, so its
// peers are told nothing; then its raft and controller stop.
func (n *ctlNode) kill() {
	n.h.mu.Lock()
	n.down = true
	n.h.mu.Unlock()
	n.Crash()
	n.stop()
}

// restart starts n again from its data dir: mesh, layer, store,
// controller.
func (n *ctlNode) restart() {
	n.h.t.Helper()
	n.startMesh(n.h.peersOf(n)...)
	n.startController()
}

// leader is the controller that leads (its state rebuilt) and that
// every live controller names, or nil.
func (h *harness) leader() *ctlNode {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lead *ctlNode
	for _, n := range h.ctls {
		if n.down {
			continue
		}
		if n.c.Leadership().Leads {
			if lead != nil {
				return nil
			}
			lead = n
		}
	}
	if lead == nil {
		return nil
	}
	for _, ns := range lead.c.Nodes() {
		if ns.Liveness != engine.Alive {
			return nil // it has not described the hosts yet
		}
	}
	for _, n := range h.ctls {
		if !n.down && n.store.Leader().Leader != lead.ID() {
			return nil
		}
	}
	return lead
}

// leaderAmong is n when it leads with its hosts described, else nil
// (the others may not know it yet).
func (h *harness) leaderAmong(n *ctlNode) *ctlNode {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !n.c.Leadership().Leads {
		return nil
	}
	for _, ns := range n.c.Nodes() {
		if ns.Liveness != engine.Alive {
			return nil
		}
	}
	return n
}

// placeOn places echo as workload name on n, which leads.
func (h *harness) placeOn(n *ctlNode, name string) string {
	h.t.Helper()
	rep, err := n.c.Place(context.Background(), plane.Order{Name: name, PackageDir: "/pkg/echo", Start: true,
		Config: ctl.InstanceConfig{Workload: name}})
	if err != nil || rep.Placed == nil {
		h.t.Fatalf("place %s on %s: %v", name, n.Name, err)
	}
	return rep.DecisionID
}

// waitLeader waits for a leader all live controllers agree on.
func (h *harness) waitLeader() *ctlNode {
	h.t.Helper()
	var lead *ctlNode
	waitFor(h.t, "a leader", func() bool { lead = h.leader(); return lead != nil })
	return lead
}

// place places echo as workload name on the leader, retrying while
// there is no leader (NotLeaderError) until the bound. It returns the
// decision id of the placement acknowledged.
func (h *harness) place(name string) string {
	h.t.Helper()
	id, err := h.tryPlace(name, waitBound)
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// tryPlace is place, safe off the test's goroutine: it returns what
// went wrong instead of failing the test.
func (h *harness) tryPlace(name string, bound time.Duration) (string, error) {
	deadline := time.Now().Add(bound)
	for attempt := 0; ; attempt++ {
		if lead := h.leader(); lead != nil {
			h.mu.Lock()
			c := lead.c
			h.mu.Unlock()
			w := fmt.Sprintf("%s-%d", name, attempt)
			// Config.Workload gives each its own instance id.
			rep, err := c.Place(context.Background(), plane.Order{Name: w, PackageDir: "/pkg/echo", Start: true,
				Config: ctl.InstanceConfig{Workload: w}})
			if err == nil && rep.Placed != nil {
				return rep.DecisionID, nil
			}
			if err == nil && !rep.Unsettled {
				return "", fmt.Errorf("place %s: nothing placed: %s", name, rep.Explain())
			}
			var nl *plane.NotLeaderError
			if err != nil && !errors.As(err, &nl) {
				h.t.Logf("place %s on %s: %v (tried again)", name, lead.Name, err)
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("place %s: no leader placed it within %v", name, bound)
		}
		time.Sleep(20 * time.Millisecond) // polls for a leader; bounded by deadline
	}
}

// placedCopies counts the hosts' instances by the decision that placed
// them.
func (h *harness) placedCopies() map[string]int {
	h.hosts.Mu.Lock()
	defer h.hosts.Mu.Unlock()
	out := map[string]int{}
	for _, hs := range h.hosts.Hosts {
		for _, in := range hs.Instances {
			out[in.DecisionID]++
		}
	}
	return out
}

// ids are the decision ids of n's placements (its replica on a
// follower).
func (n *ctlNode) ids() map[string]bool {
	n.h.mu.Lock()
	c := n.c
	n.h.mu.Unlock()
	out := map[string]bool{}
	for _, p := range c.Placements() {
		out[p.DecisionID] = true
	}
	return out
}

// waitFor waits for cond within waitBound.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waitBound)
		}
		time.Sleep(10 * time.Millisecond) // polls cond; bounded by deadline
	}
}
