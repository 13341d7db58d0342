package raftmesh

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/table"
)

// failoverKills is how many leader kills one run of
// BenchmarkLeaderFailover measures (issue 25, acceptance 6).
const failoverKills = 20

// BenchmarkLeaderFailover measures the time to a new leader after the
// leader's kill, with LANConfig: three in-process voters, each a real mesh
// on 127.0.0.1 with raft over its layer and real stores. A kill closes the
// leader's mesh socket first (its peers are told nothing, as with kill -9)
// and then stops its raft; the time runs from the socket's close until
// both survivors have observed the same new leader (raft's observer
// events, not a poll). The new leader then commits an entry with one
// follower, and the killed node is restarted from its data dir (same key,
// address and raft stores, no bootstrap) and must catch up before the
// next kill, so that every round starts with three. It reports the median
// and the max over failoverKills kills per b.N (ns/op, a whole run, says
// nothing and is dropped): make bench-raft.
func BenchmarkLeaderFailover(b *testing.B) {
	logs := &lockedBuffer{}
	b.Cleanup(func() {
		if b.Failed() {
			b.Logf("warnings and errors of the nodes:\n%s", logs.String())
		}
	})
	nodes := make([]*failoverNode, 3)
	// The nodes' leader observations: raft drops one that finds the
	// channel full, and its size is far above the changes of one round.
	obs := make(chan raft.Observation, 256)
	var voters []string
	for i, name := range []string{"a", "b", "c"} {
		n := &failoverNode{Node: meshtest.NewNode(b, name, meshtest.Options{Keepalive: testKeepalive}, admittingTable), tb: b, obs: obs}
		// The nodes log warnings and errors only, to a buffer shown if
		// the benchmark fails: a benchmark prints every b.Log line.
		n.Logger = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
			zapcore.AddSync(logs), zap.WarnLevel)).Named(name)
		nodes[i] = n
		voters = append(voters, n.ID())
		b.Cleanup(n.stopRaft)
	}
	cfg := Config{Voters: voters}
	var servers []raft.Server
	for _, n := range nodes {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.ID()), Address: raft.ServerAddress(n.ID())})
	}
	// Each link made by one dial, as link does: nodes[i] starts with
	// nodes[:i] as peers and admits the later ones once they were refused.
	for i, n := range nodes {
		n.startMesh(cfg, nodes[:i]...)
	}
	for i, n := range nodes {
		for _, p := range nodes[i+1:] {
			meshtest.WaitFor(b, p.Name+" refused by "+n.Name, func() bool { return p.RefusedBy(n.Node) })
		}
		n.Apply(n.peers(nodes)...)
		for _, p := range nodes[i+1:] {
			meshtest.WaitLinked(b, n.Node, p.Node)
		}
	}
	for _, n := range nodes {
		n.startRaft(servers)
	}
	var lead *failoverNode
	meshtest.WaitFor(b, "a leader", func() bool { lead = failoverLeader(nodes); return lead != nil })

	var took []time.Duration
	var rounds []string // one per kill, in order, logged at the end
	var applied uint64
	b.ResetTimer()
	for range b.N {
		for kill := range failoverKills {
			drain(obs)
			oldTerm := lead.term()
			killed := time.Now()
			lead.kill()
			next := waitNewLeader(b, obs, nodes, lead)
			d := time.Since(killed)
			took = append(took, d)
			if next.term() <= oldTerm {
				b.Fatalf("kill %d: new leader %s at term %d, after %s at term %d", kill+1, next.Name, next.term(), lead.Name, oldTerm)
			}
			rounds = append(rounds, fmt.Sprintf("%s->%s %v", lead.Name, next.Name, d.Round(time.Millisecond)))
			if err := next.r.Apply(add(1), 5*time.Second).Error(); err != nil {
				b.Fatalf("apply on the new leader %s: %v", next.Name, err)
			}
			applied++
			// The killed node back from its data dir, caught up.
			lead.restart(cfg, nodes)
			meshtest.WaitFor(b, lead.Name+" to catch up after its restart", func() bool { return lead.fsm.Sum() == applied })
			meshtest.WaitFor(b, "the three to agree on a leader", func() bool { lead = failoverLeader(nodes); return lead != nil })
		}
	}
	b.StopTimer()
	b.Logf("time to a new leader, kill by kill: %s", strings.Join(rounds, ", "))
	slices.Sort(took)
	median := took[len(took)/2]
	if len(took)%2 == 0 {
		median = (took[len(took)/2-1] + took[len(took)/2]) / 2
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(median)/float64(time.Millisecond), "median-ms")
	b.ReportMetric(float64(took[len(took)-1])/float64(time.Millisecond), "max-ms")
}

// failoverNode is one voter of BenchmarkLeaderFailover, which can be
// killed and restarted from its data dir.
type failoverNode struct {
	*meshtest.Node[*table.Table]
	tb     testing.TB
	layer  *Layer
	stores *Stores
	fsm    *counterFSM
	r      *raft.Raft
	// obs receives r's leader observations, shared by the nodes.
	obs  chan raft.Observation
	down bool
}

// peers are the other nodes as n's pinned peer entries.
func (n *failoverNode) peers(nodes []*failoverNode) []mesh.PeerConfig {
	var pcs []mesh.PeerConfig
	for _, p := range nodes {
		if p != n {
			pcs = append(pcs, p.Peer())
		}
	}
	return pcs
}

// startMesh builds n's mesh admitting peers, with its layer serving
// KindRaft, and runs it.
func (n *failoverNode) startMesh(cfg Config, peers ...*failoverNode) {
	n.tb.Helper()
	var pcs []mesh.PeerConfig
	for _, p := range peers {
		pcs = append(pcs, p.Peer())
	}
	n.Build(pcs...)
	l, err := New(cfg, Deps{Mesh: n.Mesh, Self: n.ID(), Logger: n.Logger, Registerer: n.Registry})
	if err != nil {
		n.tb.Fatal(err)
	}
	n.layer = l
	n.Mesh.Handle(mesh.KindRaft, l.ServeStream)
	n.Run()
}

// startRaft runs raft with LANConfig on n's layer and its stores in n's
// data dir, bootstrapped with servers unless servers is nil (a restart:
// the stores hold the configuration).
func (n *failoverNode) startRaft(servers []raft.Server) {
	n.tb.Helper()
	st, err := OpenStores(filepath.Join(n.Dir, "raft"), n.Logger)
	if err != nil {
		n.tb.Fatal(err)
	}
	n.stores, n.fsm = st, &counterFSM{}
	r, err := raft.NewRaft(LANConfig(n.ID(), n.Logger), n.fsm, st.Log, st.Stable, st.Snapshots, NewTransport(n.layer, n.Logger))
	if err != nil {
		n.tb.Fatal(err)
	}
	n.r, n.down = r, false
	r.RegisterObserver(raft.NewObserver(n.obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	if servers == nil {
		return
	}
	if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		n.tb.Fatal(err)
	}
}

// stopRaft shuts raft down (which closes its transport, so the layer) and
// closes the stores.
func (n *failoverNode) stopRaft() {
	if n.r == nil {
		return
	}
	if err := n.r.Shutdown().Error(); err != nil {
		n.tb.Errorf("raft %s shutdown: %v", n.Name, err)
	}
	if err := n.stores.Close(); err != nil {
		n.tb.Errorf("raft %s stores: %v", n.Name, err)
	}
	n.r = nil
}

// kill stops n as kill -9 would: its mesh socket closes first, so its
// peers are told nothing; then its raft stops.
func (n *failoverNode) kill() {
	n.Crash()
	n.stopRaft()
	n.down = true
}

// restart starts the killed n again on the same key, address and data
// dir, with the others as its peers.
func (n *failoverNode) restart(cfg Config, nodes []*failoverNode) {
	n.tb.Helper()
	var others []*failoverNode
	for _, p := range nodes {
		if p != n {
			others = append(others, p)
		}
	}
	n.startMesh(cfg, others...)
	n.startRaft(nil)
}

func (n *failoverNode) term() uint64 {
	v, _ := strconv.ParseUint(n.r.Stats()["term"], 10, 64)
	return v
}

// failoverLeader is the leader every live node sees, or nil.
func failoverLeader(nodes []*failoverNode) *failoverNode {
	var lead *failoverNode
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

// drain drops the leader observations seen so far.
func drain(obs chan raft.Observation) {
	for {
		select {
		case <-obs:
		default:
			return
		}
	}
}

// waitNewLeader waits on the nodes' leader observations until every live
// node has observed the same leader, other than old, and returns it.
func waitNewLeader(tb testing.TB, obs chan raft.Observation, nodes []*failoverNode, old *failoverNode) *failoverNode {
	tb.Helper()
	deadline := time.NewTimer(meshtest.WaitTimeout)
	defer deadline.Stop()
	seen := map[*failoverNode]raft.ServerID{}
	for {
		var want raft.ServerID
		agreed := true
		for _, n := range nodes {
			id := seen[n]
			switch {
			case n.down:
			case id == "" || id == raft.ServerID(old.ID()) || (want != "" && id != want):
				agreed = false
			default:
				want = id
			}
		}
		if agreed && want != "" {
			for _, n := range nodes {
				if n.ID() == string(want) {
					return n
				}
			}
		}
		select {
		case o := <-obs:
			for _, n := range nodes {
				if !n.down && n.r == o.Raft {
					seen[n] = o.Data.(raft.LeaderObservation).LeaderID
				}
			}
		case <-deadline.C:
			tb.Fatalf("no new leader after %s's kill within %v (seen %v)", old.Name, meshtest.WaitTimeout, seen)
		}
	}
}

// lockedBuffer is the nodes' log, written by their goroutines.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
