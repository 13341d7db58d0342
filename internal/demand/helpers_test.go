package demand

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/table"
)

// fakeController is a test double of the controller's demand side: it
// offers its standbys and takes demands idempotently, counting calls and
// starts.
type fakeController struct {
	mu      sync.Mutex
	standby []Standby
	calls   int
	starts  int
	from    []string
	started map[string]bool
	called  chan string // a demand's role, when buffered room is left
}

func newFakeController(sbs ...Standby) *fakeController {
	return &fakeController{standby: sbs, started: map[string]bool{}, called: make(chan string, 64)}
}

func (f *fakeController) Standby() []Standby {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Standby(nil), f.standby...)
}

func (f *fakeController) Demand(_ context.Context, role, from string) (string, error) {
	f.mu.Lock()
	f.calls++
	f.from = append(f.from, from)
	state := table.StateStarting
	if !f.started[role] {
		f.started[role] = true
		f.starts++
		state = table.StateCold
	}
	f.mu.Unlock()
	select {
	case f.called <- role:
	default:
	}
	return state, nil
}

func (f *fakeController) counts() (calls, starts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.starts
}

// testClock is a manual clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Now()} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// cluster is a controller node A and consumer nodes on real quic-go links
// on loopback, with real tables.
type cluster struct {
	a    *meshtest.Node[*Advertiser]
	aTbl *table.Table
	ctl  *fakeController
	aDem *Node
	aReg *prometheus.Registry
	rec  Recorder
}

// newController starts A with ctl's standbys, admitting peers, serving
// KindDemand with rec as its recorder.
func newController(t *testing.T, ctl *fakeController, rec Recorder, peers ...mesh.PeerConfig) *cluster {
	t.Helper()
	c := &cluster{ctl: ctl, rec: rec, aReg: prometheus.NewRegistry()}
	c.a = meshtest.NewNode(t, "a", meshtest.Options{}, func(id string, admit *meshtest.Admission) *Advertiser {
		c.aTbl = table.New(id, table.Options{Admission: admit})
		return NewAdvertiser(c.aTbl, ctl, id)
	})
	c.a.Config.LivenessTimeout = testLiveness
	c.a.Build(peers...)
	var err error
	c.aDem, err = New(Deps{Key: c.a.Ident.PrivateKey(), Table: c.aTbl, Mesh: c.a.Mesh, Controller: ctl,
		Advertiser: c.a.Table, Recorder: rec, Logger: c.a.Logger, Registerer: c.aReg})
	if err != nil {
		t.Fatal(err)
	}
	c.a.Mesh.Handle(mesh.KindDemand, c.aDem.Server.ServeStream)
	c.a.Run()
	runNode(t, c.aDem)
	return c
}

// consumer is a node with a real table on clock and its demand side.
type consumer struct {
	n   *meshtest.Node[*table.Table]
	dem *Node
	reg *prometheus.Registry
}

func newConsumer(t *testing.T, name string, clock func() time.Time) *consumer {
	t.Helper()
	c := &consumer{reg: prometheus.NewRegistry()}
	c.n = meshtest.NewNode(t, name, meshtest.Options{}, func(id string, admit *meshtest.Admission) *table.Table {
		return table.New(id, table.Options{Admission: admit, Now: clock})
	})
	c.n.Config.LivenessTimeout = testLiveness
	return c
}

// testLiveness is the nodes' mesh liveness timeout: no test here loses a
// link on purpose, and under -race on a loaded machine a flood of demand
// calls starved the heartbeats past the 2 s default (TestDemandFlood's
// calls failed "liveness timeout", then "no mesh link").
const testLiveness = mesh.MaxLivenessTimeout

// start runs c's mesh admitting peers, and its demand side on clock.
func (c *consumer) start(t *testing.T, clock func() time.Time, peers ...mesh.PeerConfig) {
	t.Helper()
	c.n.Start(peers...)
	var err error
	c.dem, err = New(Deps{Key: c.n.Ident.PrivateKey(), Table: c.n.Table, Mesh: c.n.Mesh, Logger: c.n.Logger,
		Registerer: c.reg, Now: clock, WindowNow: clock})
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, c.dem)
}

// runNode runs n until the test ends, and waits for it to return.
func runNode(t *testing.T, n *Node) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// served is A's count of demand calls served with outcome.
func (c *cluster) served(outcome string) float64 {
	return testutil.ToFloat64(c.aDem.Server.met.served.WithLabelValues(outcome))
}

// rawCall sends wire on a KindDemand stream from n to node and returns
// the answer, checked against key only for its signature.
func rawCall(t *testing.T, n *meshtest.Node[*table.Table], node string, key ed25519.PublicKey, wire []byte) Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StreamTimeout)
	defer cancel()
	st, err := n.Mesh.OpenStream(ctx, node, mesh.KindDemand)
	if err != nil {
		t.Fatal(err)
	}
	if err := mesh.WriteFrame(st, FrameRequest, wire); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseWrite()
	typ, out, err := mesh.ReadFrame(st, MaxResponseBytes)
	if err != nil || typ != FrameResponse {
		t.Fatalf("answer: type %d: %v", typ, err)
	}
	st.StopReading(mesh.StreamCodeCancelled)
	payload, pub, err := ctl.Open(out, ResponseDomain, MaxPayloadBytes)
	if err != nil || !pub.Equal(key) {
		t.Fatalf("answer not signed by the controller: %v", err)
	}
	var resp Response
	if err := ctl.DecodeStrict(payload, &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// request is a valid demand request from key to target for role, issued
// at now.
func request(t *testing.T, key ed25519.PrivateKey, target, role string, now time.Time) (Request, []byte) {
	t.Helper()
	nonce, err := ctl.NewNonce(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Version: Version, Role: role, Requester: selfID(key), Target: target, Nonce: nonce,
		IssuedAtMS: now.UnixMilli(), ExpiresAtMS: now.Add(RequestTTL).UnixMilli()}
	wire, err := sealJSON(key, RequestDomain, req)
	if err != nil {
		t.Fatal(err)
	}
	return req, wire
}

func nopLogger() *zap.Logger { return zap.NewNop() }

func selfIDPub(pub ed25519.PublicKey) string { return identity.NodeID(pub) }
