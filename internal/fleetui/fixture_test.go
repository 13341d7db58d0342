package fleetui

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

// The fixture: a controller's read model of n nodes and m placements,
// behind the real operator.Router, and a node status document.

const gib = 1 << 30

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// fleetFake is a controller of a synthetic fleet (operator.Controller):
// its recent decisions are real engine decisions over its nodes.
type fleetFake struct {
	nodes      []plane.NodeView
	placements []plane.Placement
	decls      []plane.DeclarationView
	recent     map[string]plane.Report
	ids        []string
}

var _ operator.Controller = (*fleetFake)(nil)

func (f *fleetFake) Place(context.Context, plane.Order) (plane.Report, error) {
	return plane.Report{}, fmt.Errorf("read-only fixture")
}
func (f *fleetFake) Start(context.Context, string) (plane.Placement, error) {
	return plane.Placement{}, fmt.Errorf("read-only fixture")
}
func (f *fleetFake) Stop(context.Context, string) (plane.Placement, error) {
	return plane.Placement{}, fmt.Errorf("read-only fixture")
}
func (f *fleetFake) Unload(context.Context, string) (plane.Placement, error) {
	return plane.Placement{}, fmt.Errorf("read-only fixture")
}

// Placements returns a copy, as the controller does.
func (f *fleetFake) Placements() []plane.Placement {
	return append([]plane.Placement(nil), f.placements...)
}
func (f *fleetFake) Declarations() []plane.DeclarationView { return f.decls }
func (f *fleetFake) NodeViews() []plane.NodeView           { return f.nodes }
func (f *fleetFake) Recent(id string) (plane.Report, bool) {
	r, ok := f.recent[id]
	return r, ok
}
func (f *fleetFake) RecentIDs() []string          { return f.ids }
func (f *fleetFake) Leadership() plane.LeaderInfo { return plane.LeaderInfo{Role: plane.RoleLeader} }

func nodeID(i int) string { return fmt.Sprintf("a%03x%060x", i, i) }
func decID(i int) string  { return fmt.Sprintf("d%03x%060x", i, i) }

// newFleet makes n nodes (one in ten dead, one in five discovered) and
// m placements over them, and decisions recent engine decisions.
func newFleet(t testing.TB, n, m, decisions int) *fleetFake {
	f := &fleetFake{recent: map[string]plane.Report{}}
	var en []engine.Node
	for i := range n {
		v := plane.NodeView{ID: nodeID(i), Tier: engine.TrustPaired, Liveness: engine.Alive, HasFacts: true,
			FactsSeq: uint64(i + 1), FactsAge: time.Duration(i%30) * time.Second, MemFreeBytes: uint64(8+i%56) * gib,
			MemTotalBytes: 64 * gib, GPUs: i % 2, Class: "cpu", Instances: m / max(n, 1), Placements: m / max(n, 1)}
		if i%2 == 1 {
			v.VRAMFreeBytes, v.VRAMTotalBytes, v.Class = 10*gib, 24*gib, "gpu"
		}
		if i%10 == 9 {
			v.Liveness = engine.Dead
		}
		if i%5 == 4 {
			v.Tier = engine.TrustDiscovered
		}
		f.nodes = append(f.nodes, v)
		en = append(en, engine.Node{ID: v.ID, Trust: v.Tier, Liveness: v.Liveness, Gate: engine.VerdictAllow,
			Memory: engine.Memory{HostFree: v.MemFreeBytes}})
	}
	for i := range m {
		p := plane.Placement{DecisionID: decID(i), Kind: "inference", Workload: fmt.Sprintf("chat-%d", i%40),
			Package: "echo-llm", Version: "1.0.0", Node: nodeID(i % max(n, 1)), Variant: "cpu",
			InstanceID: fmt.Sprintf("i-%012x", i), Life: plane.LifePlaced, HostState: "running", PlacedAt: t0.Add(time.Duration(i) * time.Second)}
		if i%50 == 7 {
			p.Life, p.LostReason = plane.LifeLost, "its node is dead"
		}
		f.placements = append(f.placements, p)
	}
	for i := range min(40, m) {
		f.decls = append(f.decls, plane.DeclarationView{Name: fmt.Sprintf("chat-%d", i), Package: "echo-llm", Replicas: m / 40, Placed: m / 40, State: plane.DeclPlaced})
	}
	for i := range decisions {
		req := engine.Request{Kind: "inference", Name: fmt.Sprintf("chat-%d", i), MinTrust: engine.TrustPaired,
			Variants: []engine.Variant{{Name: "cpu", Resources: engine.Resources{HostBytes: 4 * gib}}}}
		d, err := engine.Place(req, en, engine.Cluster{}, engine.DefaultWeights())
		if err != nil {
			t.Fatalf("engine.Place: %v", err)
		}
		rep := plane.Report{DecisionID: decID(i), Decision: d}
		if d.Chosen != nil {
			p := plane.Placement{DecisionID: decID(i), Node: d.Chosen.Node, Variant: d.Chosen.Variant, Life: plane.LifePlaced}
			rep.Placed = &p
			rep.Attempts = []plane.Attempt{{Node: d.Chosen.Node, Variant: d.Chosen.Variant, Outcome: "placed"}}
		}
		f.recent[rep.DecisionID] = rep
		f.ids = append(f.ids, rep.DecisionID)
	}
	return f
}

// hostBackend is the per-node verbs of the fixture (operator.Backend):
// logs of the instances it holds, refused for any other.
type hostBackend struct{ logs map[string]ctl.LogsResult }

var _ operator.Backend = hostBackend{}

func (hostBackend) Verbs() []string { return []string{operator.VerbLogs} }
func (b hostBackend) Operate(_ context.Context, req operator.Request) operator.Response {
	if req.Verb != operator.VerbLogs {
		return operator.Response{Class: operator.ClassError, Reason: "not in the fixture"}
	}
	res, ok := b.logs[req.Args.Instance]
	if !ok {
		return operator.Response{Class: operator.ClassRefused, Code: "unknown_instance", Reason: "no instance " + req.Args.Instance}
	}
	raw, _ := json.Marshal(res)
	return operator.Response{OK: true, Class: operator.ClassOK, Result: raw}
}

// fixture is a UI over a synthetic fleet.
type fixture struct {
	ui       *UI
	fleet    *fleetFake
	router   *operator.Router
	activity *activity.Log
	status   *operator.StatusDoc
}

func newFixture(t testing.TB, nodes, placements, decisions int) *fixture {
	fl := newFleet(t, nodes, placements, decisions)
	names := map[string]string{}
	for i := range min(nodes, 3) {
		names[nodeID(i)] = string(rune('a' + i))
	}
	logs := map[string]ctl.LogsResult{"i-000000000001": {InstanceID: "i-000000000001", Stdout: "hello <b>out</b>\n", Stderr: "warn\n"}}
	r, err := operator.NewRouter(operator.RouterDeps{
		Dispatcher: hostBackend{logs: logs}, Controller: fl, Store: noStore{}, NodeID: nodeID(0),
		ResolveNode: func(ref string) (string, bool) { return ref, true },
		PeerNames:   func() map[string]string { return names },
	})
	if err != nil {
		t.Fatal(err)
	}
	st := &operator.StatusDoc{NodeID: nodeID(0), Name: "a", Version: "v-test", Ready: true, UptimeSeconds: 42}
	st.Chain.Seq, st.Chain.Hash = 17, fmt.Sprintf("%064x", 0xc4a1)
	st.Roles = []operator.RoleDoc{
		{Name: "chat", Listen: "127.0.0.1:8081", Resolved: "remote " + nodeID(1), Concurrency: 8},
		{Name: "embed", Listen: "127.0.0.1:8082", Resolved: "local http://127.0.0.1:9000", Inflight: 1, Concurrency: 4},
		{Name: "big", Listen: "127.0.0.1:8083", OnDemand: "starting", OnDemandFrom: nodeID(0), Held: 3},
	}
	st.Mesh = &operator.MeshDoc{Listen: "127.0.0.1:7000", Peers: []operator.PeerDoc{
		{Name: "b", ID: nodeID(1), Addr: "127.0.0.1:7001", State: "up", Tier: "paired", RTTMillis: 0.4},
		{Name: "c", ID: nodeID(2), Addr: "127.0.0.1:7002", State: "up", Tier: "paired", RTTMillis: 0.5},
	}}
	st.Host = &host.HostStatus{Enabled: true, Instances: []host.InstanceInfo{{ID: "i-000000000001", DecisionID: decID(1),
		Package: "echo-llm", Version: "1.0.0", Variant: "cpu", Role: "chat", Runtime: "openai", State: "running", Since: t0}}}
	act := activity.New(0, func() time.Time { return t0 })
	act.Add(activity.Request{At: t0, Role: "chat", Route: activity.RoutePeer, Node: nodeID(1), Status: 200,
		TTFB: 12 * time.Millisecond, Duration: 80 * time.Millisecond, Tokens: 40, TokensPerSec: 588.2})
	ui, err := New(Deps{Status: func() *operator.StatusDoc { return st }, Source: r, Activity: act,
		Now: func() time.Time { return t0 }, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ui: ui, fleet: fl, router: r, activity: act, status: st}
}

// noStore is a package store that holds nothing (the fixture places
// nothing).
type noStore struct{}

func (noStore) Resolve(id, version string) (string, string, error) {
	return "", "", fmt.Errorf("no package %s", id)
}
