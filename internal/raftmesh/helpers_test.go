package raftmesh

import (
	"encoding/binary"
	"io"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/table"
)

// testKeepalive is the mesh keep-alive of test nodes.
const testKeepalive = 300 * time.Millisecond

// counterFSM is the test state machine: the sum of the 8-byte values
// applied, plus the length of any other command (a large entry).
type counterFSM struct {
	mu  sync.Mutex // guards sum
	sum uint64
}

func (f *counterFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(l.Data) != 8 {
		f.sum += uint64(len(l.Data))
		return f.sum
	}
	f.sum += binary.BigEndian.Uint64(l.Data)
	return f.sum
}

func (f *counterFSM) Sum() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sum
}

func (f *counterFSM) Snapshot() (raft.FSMSnapshot, error) { return counterSnap(f.Sum()), nil }

func (f *counterFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	f.sum = binary.BigEndian.Uint64(b[:])
	f.mu.Unlock()
	return nil
}

type counterSnap uint64

func (s counterSnap) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(binary.BigEndian.AppendUint64(nil, uint64(s))); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (counterSnap) Release() {}

func add(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// node is one in-process controller: a real mesh on 127.0.0.1, its raft
// stream layer serving KindRaft and, once startRaft ran, raft on it.
type node struct {
	*meshtest.Node[*table.Table]
	t      *testing.T
	layer  *Layer
	stores *Stores
	fsm    *counterFSM
	r      *raft.Raft
	down   bool
}

func admittingTable(id string, admit *meshtest.Admission) *table.Table {
	return table.New(id, table.Options{Admission: admit})
}

func newNodes(t *testing.T, names ...string) []*node {
	t.Helper()
	out := make([]*node, len(names))
	for i, name := range names {
		out[i] = &node{Node: meshtest.NewNode(t, name, meshtest.Options{Keepalive: testKeepalive}, admittingTable), t: t}
	}
	return out
}

func ids(nodes ...*node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.ID())
	}
	return out
}

// start builds n's mesh admitting peers, its layer with cfg (voters by
// id) serving KindRaft, and runs the mesh.
func (n *node) start(cfg Config, peers ...*node) {
	n.t.Helper()
	var pcs []mesh.PeerConfig
	for _, p := range peers {
		pcs = append(pcs, p.Peer())
	}
	n.Build(pcs...)
	l, err := New(cfg, Deps{Mesh: n.Mesh, Self: n.ID(), Logger: n.Logger, Registerer: n.Registry})
	if err != nil {
		n.t.Fatal(err)
	}
	n.layer = l
	n.Mesh.Handle(mesh.KindRaft, l.ServeStream)
	n.Run()
	n.t.Cleanup(func() { _ = l.Close() })
}

// startRaft runs raft on n's layer with the LAN config and real stores in
// n's data dir, bootstrapped with voters (unless there are none).
func (n *node) startRaft(voters ...*node) {
	n.t.Helper()
	n.startRaftWith(nil, voters...)
}

// startRaftWith is startRaft with tune, when set, changing the config.
func (n *node) startRaftWith(tune func(*raft.Config), voters ...*node) {
	n.t.Helper()
	st, err := OpenStores(filepath.Join(n.Dir, "raft"), n.Logger)
	if err != nil {
		n.t.Fatal(err)
	}
	n.stores, n.fsm = st, &counterFSM{}
	cfg := LANConfig(n.ID(), n.Logger)
	if tune != nil {
		tune(cfg)
	}
	r, err := raft.NewRaft(cfg, n.fsm, st.Log, st.Stable, st.Snapshots, NewTransport(n.layer, n.Logger))
	if err != nil {
		n.t.Fatal(err)
	}
	n.r = r
	n.t.Cleanup(n.stopRaft)
	var servers []raft.Server
	for _, v := range voters {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v.ID()), Address: raft.ServerAddress(v.ID())})
	}
	if len(servers) == 0 {
		return // joins a cluster that lists it: the leader brings its state
	}
	if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		n.t.Fatal(err)
	}
}

// stopRaft shuts raft down (which closes its transport, so the layer) and
// closes the stores.
func (n *node) stopRaft() {
	if n.r == nil {
		return
	}
	if err := n.r.Shutdown().Error(); err != nil {
		n.t.Errorf("raft %s shutdown: %v", n.Name, err)
	}
	if err := n.stores.Close(); err != nil {
		n.t.Errorf("raft %s stores: %v", n.Name, err)
	}
	n.r = nil
}

// kill stops n as kill -9 would: its mesh socket closes first, so its
// peers are told nothing; then its raft stops.
func (n *node) kill() {
	n.Crash()
	n.stopRaft()
	n.down = true
}

// leader is the node the live nodes all see as leader, or nil.
func leader(nodes []*node) *node {
	var lead *node
	var addr raft.ServerAddress
	for _, n := range nodes {
		if n.down {
			continue
		}
		a, _ := n.r.LeaderWithID()
		if a == "" || (addr != "" && a != addr) {
			return nil
		}
		addr = a
		if n.r.State() == raft.Leader {
			lead = n
		}
	}
	if lead == nil || string(addr) != lead.ID() {
		return nil
	}
	return lead
}

func term(n *node) uint64 {
	v, _ := strconv.ParseUint(n.r.Stats()["term"], 10, 64)
	return v
}

// link links the running nodes pairwise, each link made by one dial
// (meshtest.AdmitLater): nodes[i] was started with nodes[:i] as peers and
// admits nodes[i+1:] once their dials to it were refused.
func link(t *testing.T, nodes ...*node) {
	t.Helper()
	for i, n := range nodes {
		later := nodes[i+1:]
		for _, p := range later {
			meshtest.WaitFor(t, p.Name+" refused by "+n.Name, func() bool { return p.RefusedBy(n.Node) })
		}
		var all []mesh.PeerConfig
		for _, p := range nodes {
			if p != n {
				all = append(all, p.Peer())
			}
		}
		n.Apply(all...)
		for _, p := range later {
			meshtest.WaitLinked(t, n.Node, p.Node)
		}
	}
}

// streams reads the layer's streams counter.
func (n *node) streams(direction, result string) int {
	return int(testutil.ToFloat64(n.layer.met.streams.WithLabelValues(direction, result)))
}

func testutilGauge(n *node) float64 { return testutil.ToFloat64(n.layer.met.open) }
