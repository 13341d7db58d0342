package plane

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// fakeCluster is planetest's cluster of in-process nodes as the
// controller's Dispatcher: it converts the calls that carry plane's types.
type fakeCluster struct{ *planetest.Cluster }

type fakePkg struct{ v *pkg.Verified }

func (p fakePkg) Verified() *pkg.Verified { return p.v }

var _ Dispatcher = (*fakeCluster)(nil)

func newCluster(clk *planetest.Clock) *fakeCluster {
	return &fakeCluster{planetest.NewCluster(clk)}
}

func (f *fakeCluster) Describe(ctx context.Context, node string) (Description, error) {
	d, err := f.Cluster.Describe(ctx, node)
	return Description(d), err
}

func (f *fakeCluster) VerifyPackage(ctx context.Context, dir string) (Package, error) {
	v, err := f.Cluster.VerifyPackage(ctx, dir)
	if err != nil {
		return nil, err
	}
	return fakePkg{v}, nil
}

func (f *fakeCluster) PlaceDecided(ctx context.Context, node string, p Package, variant string, cfg ctl.InstanceConfig, start bool, decisionID string) (ctl.PlaceResult, error) {
	return f.Cluster.PlaceDecided(ctx, node, p.Verified(), variant, cfg, start, decisionID)
}

// targets are the cluster's nodes as the controller's targets, of tier.
func (f *fakeCluster) targets(tier engine.Trust) []Target {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	var ts []Target
	for _, h := range f.Hosts {
		ts = append(ts, Target{ID: h.ID, Key: h.Key.Public().(ed25519.PublicKey), Tier: tier})
	}
	slices.SortFunc(ts, func(a, b Target) int { return strings.Compare(a.ID, b.ID) })
	return ts
}

// rig is a controller on a fake cluster with a real chain.
type rig struct {
	t       *testing.T
	clk     *planetest.Clock
	cl      *fakeCluster
	chain   *chain.Chain
	app     Appender // what the controller appends to: chain unless set
	key     ed25519.PrivateKey
	state   string
	cfg     Config
	c       *Controller
	targets []Target
	store   Store       // Deps.Store; nil for none
	rev     Revocations // Deps.Revocations; nil for none
}

func newRig(t *testing.T, hosts ...uint64) (*rig, []*planetest.Host) {
	t.Helper()
	clk := planetest.NewClock(t0)
	cl := newCluster(clk)
	var hs []*planetest.Host
	for i, mem := range hosts {
		hs = append(hs, cl.AddNode(t, byte(i+1), mem))
	}
	cl.AddPackage("/pkg/echo", "echo", pkg.KindService, 1)
	dir, ch, ck := testChain(t, clk)
	cfg := pairedServices()
	r := &rig{t: t, clk: clk, cl: cl, chain: ch, key: ck, state: filepath.Join(dir, "controller.json"), cfg: cfg,
		targets: cl.targets(engine.TrustPaired)}
	r.restart()
	return r, hs
}

// testChain is a chain in a new test directory, signed by test key 99,
// on clk; the test closes it. It returns the directory and the key too.
func testChain(t testing.TB, clk *planetest.Clock) (string, *chain.Chain, ed25519.PrivateKey) {
	t.Helper()
	dir := t.TempDir()
	ck, _ := testKey(t, 99)
	ch, _, err := chain.Open(filepath.Join(dir, "chain.log"), ck, chain.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	return dir, ch, ck
}

// pairedServices is the default config with services placed on paired
// nodes.
func pairedServices() Config {
	cfg := Default()
	cfg.Policy.Kinds = map[string]KindRule{pkg.KindService: {MinTier: engine.TrustPaired}}
	return cfg
}

// restart drops the controller and builds a new one from the state file,
// as a crash and restart would.
func (r *rig) restart() {
	r.t.Helper()
	var app Appender = r.chain
	if r.app != nil {
		app = r.app
	}
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: app, Dispatcher: r.cl, StatePath: r.state, Store: r.store, Revocations: r.rev})
	if err != nil {
		r.t.Fatalf("New: %v", err)
	}
	r.c = c
}

func (r *rig) tick() {
	r.t.Helper()
	if err := r.c.Tick(context.Background()); err != nil {
		r.t.Fatalf("Tick: %v", err)
	}
}

func (r *rig) place(o Order) Report {
	r.t.Helper()
	rep, err := r.c.Place(context.Background(), o)
	if err != nil {
		r.t.Fatalf("Place: %v", err)
	}
	return rep
}

func (r *rig) entries(kind string) []chain.Entry {
	r.t.Helper()
	if _, err := chain.VerifyFile(r.chain.Path(), r.key.Public().(ed25519.PublicKey)); err != nil {
		r.t.Fatalf("verify chain: %v", err)
	}
	data, err := os.ReadFile(r.chain.Path())
	if err != nil {
		r.t.Fatal(err)
	}
	var out []chain.Entry
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var e chain.Entry
		if err := json.Unmarshal(line, &e); err != nil {
			r.t.Fatal(err)
		}
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func (r *rig) wantCopies(pkgID string, n int) []string {
	r.t.Helper()
	got, on := r.cl.Copies(pkgID)
	if got != n {
		r.t.Fatalf("%d copies of %s (on %v), want %d", got, pkgID, on, n)
	}
	return on
}

var echo = Order{PackageDir: "/pkg/echo", Start: true}
