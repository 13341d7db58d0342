package raftmesh

import (
	"bytes"
	"errors"
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
	var voters []string
	for i, name := range []string{"a", "b", "c"} {
		n := &failoverNode{Node: meshtest.NewNode(b, name, meshtest.Options{Keepalive: testKeepalive}, admittingTable)}
		// The nodes log warnings and errors only, to a buffer shown if
		// the benchmark fails: a benchmark prints every b.Log line.
		n.Logger = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
			zapcore.AddSync(logs), zap.WarnLevel)).Named(name)
		nodes[i] = n
		voters = append(voters, n.ID())
		b.Cleanup(func() {
			if err := n.stopRaft(); err != nil {
				b.Error(err)
			}
		})
	}
	cfg := Config{Voters: voters}
	var servers []raft.Server
	for _, n := range nodes {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.ID()), Address: raft.ServerAddress(n.ID())})
	}
	// Each link made by one dial, as link does: nodes[i] starts with
	// nodes[:i] as peers and admits the later ones once they were refused.
	for i, n := range nodes {
		for _, p := range nodes[:i] {
			n.Config.Peers = append(n.Config.Peers, p.Peer())
		}
		if err := n.runMesh(cfg); err != nil {
			b.Fatal(err)
		}
	}
	for i, n := range nodes {
		for _, p := range nodes[i+1:] {
			meshtest.WaitFor(b, p.Name+" refused by "+n.Name, func() bool { return p.RefusedBy(n.Node) })
		}
		var all []mesh.PeerConfig
		for _, p := range nodes {
			if p != n {
				all = append(all, p.Peer())
			}
		}
		n.Apply(all...) // the peers its mesh has after a restart too
		for _, p := range nodes[i+1:] {
			meshtest.WaitLinked(b, n.Node, p.Node)
		}
	}
	w := &leaderWatch{obs: make(chan raft.Observation, 256), seen: map[*failoverNode]raft.ServerID{}}
	for _, n := range nodes {
		if err := n.startRaft(servers, w); err != nil {
			b.Fatal(err)
		}
	}
	lead := w.wait(b, nodes)

	var took []time.Duration
	var rounds []string // one per kill, in order, logged at the end
	var applied uint64
	b.ResetTimer()
	for range b.N {
		for kill := range failoverKills {
			oldTerm := lead.term()
			killed := time.Now()
			if err := lead.kill(); err != nil {
				b.Fatal(err)
			}
			next := w.wait(b, nodes) // lead is down: another
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
			if err := lead.runMesh(cfg); err != nil {
				b.Fatal(err)
			}
			if err := lead.startRaft(nil, w); err != nil {
				b.Fatal(err)
			}
			meshtest.WaitFor(b, lead.Name+" to catch up after its restart", func() bool { return lead.fsm.Sum() == applied })
			lead = w.wait(b, nodes)
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
	layer  *Layer
	stores *Stores
	fsm    *counterFSM
	r      *raft.Raft // nil while down
}

// runMesh builds n's mesh admitting the peers of its config, with its
// layer serving KindRaft, and runs it: the first time, and after a kill
// on the same key, address and data dir.
func (n *failoverNode) runMesh(cfg Config) error {
	n.Build(n.Config.Peers...)
	l, err := New(cfg, Deps{Mesh: n.Mesh, Self: n.ID(), Logger: n.Logger, Registerer: n.Registry})
	if err != nil {
		return fmt.Errorf("%s: layer: %w", n.Name, err)
	}
	n.layer = l
	n.Mesh.Handle(mesh.KindRaft, l.ServeStream)
	n.Run()
	return nil
}

// startRaft runs raft with LANConfig on n's layer and its stores in n's
// data dir, watched by w, and bootstraps it with servers unless servers
// is nil (a restart: the stores hold the configuration).
func (n *failoverNode) startRaft(servers []raft.Server, w *leaderWatch) error {
	st, err := OpenStores(filepath.Join(n.Dir, "raft"), n.Logger)
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	fsm := &counterFSM{}
	r, err := raft.NewRaft(LANConfig(n.ID(), n.Logger), fsm, st.Log, st.Stable, st.Snapshots, NewTransport(n.layer, n.Logger))
	if err != nil {
		return errors.Join(fmt.Errorf("%s: raft: %w", n.Name, err), st.Close())
	}
	n.stores, n.fsm, n.r = st, fsm, r
	w.add(n)
	if servers == nil {
		return nil
	}
	return r.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
}

// stopRaft shuts n's raft down, which closes its transport and so its
// layer, and closes its stores; it does nothing while n is down.
func (n *failoverNode) stopRaft() error {
	if n.r == nil {
		return nil
	}
	r := n.r
	n.r = nil
	return errors.Join(r.Shutdown().Error(), n.stores.Close())
}

// kill stops n as kill -9 would: its mesh socket closes first, so its
// peers are told nothing; then its raft stops.
func (n *failoverNode) kill() error {
	n.Crash()
	if err := n.stopRaft(); err != nil {
		return fmt.Errorf("kill %s: %w", n.Name, err)
	}
	return nil
}

func (n *failoverNode) term() uint64 {
	v, _ := strconv.ParseUint(n.r.Stats()["term"], 10, 64)
	return v
}

// leaderWatch follows the leader each node's raft has observed, from
// raft's leader observations.
type leaderWatch struct {
	// obs receives every node's leader observations: raft drops one that
	// finds it full, and its size is far above the changes of a round.
	obs  chan raft.Observation
	seen map[*failoverNode]raft.ServerID // the last leader each observed
}

// add watches n's new raft: its observer first, then the leader it knows
// already, so that no change falls between the two.
func (w *leaderWatch) add(n *failoverNode) {
	n.r.RegisterObserver(raft.NewObserver(w.obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	_, id := n.r.LeaderWithID()
	w.seen[n] = id
}

// wait takes the observations as they come until every running node has
// observed the same running leader, and returns it.
func (w *leaderWatch) wait(tb testing.TB, nodes []*failoverNode) *failoverNode {
	tb.Helper()
	deadline := time.NewTimer(meshtest.WaitTimeout)
	defer deadline.Stop()
	for {
		if lead := w.agreed(nodes); lead != nil {
			return lead
		}
		select {
		case o := <-w.obs:
			for _, n := range nodes {
				if n.r != nil && n.r == o.Raft { // not a killed node's old raft
					w.seen[n] = o.Data.(raft.LeaderObservation).LeaderID
				}
			}
		case <-deadline.C:
			tb.Fatalf("the running nodes did not agree on a running leader within %v: %v", meshtest.WaitTimeout, w.seen)
		}
	}
}

// agreed is the leader every running node has observed, if they agree on
// one that runs; else nil.
func (w *leaderWatch) agreed(nodes []*failoverNode) *failoverNode {
	var id raft.ServerID
	for _, n := range nodes {
		if n.r == nil {
			continue
		}
		if w.seen[n] == "" || (id != "" && w.seen[n] != id) {
			return nil
		}
		id = w.seen[n]
	}
	for _, n := range nodes {
		if n.r != nil && raft.ServerID(n.ID()) == id {
			return n
		}
	}
	return nil
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
