package plane

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/pkg"
)

// clock is a fake clock the test moves.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Place behaviours of a fake host.
type placeMode int

const (
	placeOK placeMode = iota
	placeRefuse
	placeLostAfterActing // places, then the answer is lost
	placeLostNoAct       // the answer is lost and nothing was placed
	placeInFlight        // the answer is lost; status shows it in flight
)

// fakeHost is one workload host of the fake cluster.
type fakeHost struct {
	id        string
	key       ed25519.PrivateKey
	facts     facts.Facts
	seq       uint64
	down      bool // killed: every call is unreachable
	frozen    bool // describe blocks until ctx ends
	statusErr bool // status unreachable (while describe works)
	noListing bool // describe carries no instance listing
	hostOff   bool // describe shows the host disabled (host.enabled false)
	noHost    bool // describe carries no workload-host advertisement
	place     placeMode
	unloadErr *ctl.Refusal
	instances map[string]ctl.InstanceStatus
	inFlight  []string
	departed  []ctl.Departed
	// meta is what the fake knows of each instance beyond its status.
	meta map[string]instMeta
	// startAs is the state a started instance reports ("" = running).
	startAs string
	// startErr, when set, refuses every start (the instance stays as it
	// is).
	startErr *ctl.Refusal
}

// instMeta is an instance's declared workload (from its config) and
// package version.
type instMeta struct{ workload, version string }

// fakeCluster implements Dispatcher over fake hosts.
type fakeCluster struct {
	clock *clock
	mu    sync.Mutex // guards everything below and the hosts
	hosts map[string]*fakeHost
	pkgs  map[string]*pkg.Verified
	// revoked holds the revocation each package dir is refused with.
	revoked map[string]*pkg.VerifyError
	// verifies counts VerifyPackage calls per dir.
	verifies map[string]int
	calls    []string
	// A crash: when crashArmed, the next place captures the state file
	// (crashState, as the crash leaves it), reaches its node or not
	// (crashActs), and from then on every call fails without effect
	// (crashed) until the test restarts the controller.
	crashArmed bool
	crashActs  bool
	crashed    bool
	crashPath  string
	crashState []byte
}

type fakePkg struct{ v *pkg.Verified }

func (p fakePkg) Verified() *pkg.Verified { return p.v }

var _ Dispatcher = (*fakeCluster)(nil)

func newCluster(clk *clock) *fakeCluster {
	return &fakeCluster{clock: clk, hosts: map[string]*fakeHost{}, pkgs: map[string]*pkg.Verified{},
		revoked: map[string]*pkg.VerifyError{}, verifies: map[string]int{}}
}

// addHost adds a host with memFree GiB of free memory.
func (f *fakeCluster) addHost(t testing.TB, seed byte, memGiB uint64) *fakeHost {
	k, id := testKey(t, seed)
	fa := sampleFacts()
	fa.GPUs = nil
	fa.Labels = nil
	fa.MemFreeBytes = memGiB << 30
	h := &fakeHost{id: id, key: k, facts: fa, instances: map[string]ctl.InstanceStatus{}, meta: map[string]instMeta{}}
	f.mu.Lock()
	f.hosts[id] = h
	f.mu.Unlock()
	return h
}

func (f *fakeCluster) targets(tier engine.Trust) []Target {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ts []Target
	for _, h := range f.hosts {
		ts = append(ts, Target{ID: h.id, Key: h.key.Public().(ed25519.PublicKey), Tier: tier})
	}
	slices.SortFunc(ts, func(a, b Target) int { return strings.Compare(a.ID, b.ID) })
	return ts
}

func (f *fakeCluster) set(h *fakeHost, fn func(h *fakeHost)) {
	f.mu.Lock()
	fn(h)
	f.mu.Unlock()
}

func (f *fakeCluster) host(node string) (*fakeHost, error) {
	if f.crashed {
		return nil, &ctl.CallError{Class: ctl.ClassUnreachable, Err: errors.New("the controller crashed")}
	}
	h, ok := f.hosts[node]
	if !ok || h.down {
		return nil, &ctl.CallError{Class: ctl.ClassUnreachable, Err: errors.New("no link")}
	}
	return h, nil
}

func (f *fakeCluster) status(h *fakeHost) ctl.StatusList {
	st := ctl.StatusList{InFlight: slices.Clone(h.inFlight), Departed: slices.Clone(h.departed)}
	for _, in := range h.instances {
		st.Instances = append(st.Instances, in)
	}
	slices.SortFunc(st.Instances, func(a, b ctl.InstanceStatus) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	return st
}

func (f *fakeCluster) Describe(ctx context.Context, node string) (Description, error) {
	f.mu.Lock()
	h, err := f.host(node)
	frozen := err == nil && h.frozen
	f.mu.Unlock()
	if err != nil {
		return Description{}, err
	}
	if frozen {
		<-ctx.Done()
		return Description{}, &ctl.CallError{Class: ctl.ClassUnreachable, Err: ctx.Err()}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	h.seq++
	s, err := facts.Sign(h.key, h.facts, h.seq, f.clock.Now(), 5*time.Minute)
	if err != nil {
		return Description{}, err
	}
	d := Description{Facts: s}
	if h.noHost {
		d.HostNote = "its describe shows no workload host"
	} else {
		d.Host = &ctl.HostMetadata{Instances: len(h.instances), InFlight: len(h.inFlight), Enabled: !h.hostOff}
	}
	if !h.noListing {
		st := f.status(h)
		d.Status = &st
	}
	return d, nil
}

func (f *fakeCluster) VerifyPackage(_ context.Context, dir string) (Package, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verifies[dir]++
	if r := f.revoked[dir]; r != nil {
		return nil, fmt.Errorf("package %s: %w", dir, r)
	}
	v, ok := f.pkgs[dir]
	if !ok {
		return nil, fmt.Errorf("no package at %s", dir)
	}
	return fakePkg{v}, nil
}

func (f *fakeCluster) PlaceDecided(_ context.Context, node string, p Package, variant string, cfg ctl.InstanceConfig, start bool, decisionID string) (ctl.PlaceResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "place "+node)
	armed := f.crashArmed
	if armed {
		b, err := os.ReadFile(f.crashPath)
		if err != nil {
			return ctl.PlaceResult{}, err
		}
		f.crashArmed, f.crashState = false, b
	}
	h, err := f.host(node)
	if err != nil {
		f.crashed = f.crashed || armed
		return ctl.PlaceResult{}, err
	}
	v := p.Verified()
	iid := ctl.InstanceID(v.Manifest.ID, v.Manifest.Version, variant, v.ManifestHash, cfg, node)
	state := ctl.StateLoaded
	if start {
		state = ctl.StateRunning
		if h.startAs != "" {
			state = h.startAs
		}
	}
	act := func() {
		h.instances[iid] = ctl.InstanceStatus{InstanceID: iid, Package: v.Manifest.ID, Variant: variant, DecisionID: decisionID, Lifecycle: state}
		h.meta[iid] = instMeta{workload: cfg.Workload, version: v.Manifest.Version}
		h.departed = slices.DeleteFunc(h.departed, func(d ctl.Departed) bool { return d.InstanceID == iid })
	}
	lost := &ctl.CallError{Class: ctl.ClassIndeterminate, Method: ctl.MethodPlace, Err: errors.New("answer lost")}
	if armed {
		if f.crashActs && h.place != placeRefuse {
			act()
		}
		f.crashed = true
		return ctl.PlaceResult{}, lost
	}
	switch h.place {
	case placeRefuse:
		r := ctl.NewRefusal(ctl.CodeAdmission, "no room")
		return ctl.PlaceResult{}, &ctl.CallError{Class: ctl.ClassRefused, Method: ctl.MethodPlace, Refusal: r, Err: r}
	case placeLostAfterActing:
		act()
		return ctl.PlaceResult{}, lost
	case placeLostNoAct:
		return ctl.PlaceResult{}, lost
	case placeInFlight:
		h.inFlight = append(h.inFlight, decisionID)
		return ctl.PlaceResult{}, lost
	}
	act()
	return ctl.PlaceResult{InstanceID: iid, Variant: variant, Package: v.Manifest.ID, Node: node, Status: ctl.InstanceState{State: state}}, nil
}

func (f *fakeCluster) Status(_ context.Context, node string) (ctl.StatusList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, err := f.host(node)
	if err != nil {
		return ctl.StatusList{}, err
	}
	if h.statusErr {
		return ctl.StatusList{}, &ctl.CallError{Class: ctl.ClassUnreachable, Err: errors.New("status lost")}
	}
	return f.status(h), nil
}

func (f *fakeCluster) Start(_ context.Context, node, iid string) error {
	return f.setLifecycle("start", ctl.MethodStart, node, iid, ctl.StateRunning)
}

func (f *fakeCluster) Stop(_ context.Context, node, iid string) error {
	return f.setLifecycle("stop", ctl.MethodStop, node, iid, ctl.StateStopped)
}

// setLifecycle is Start and Stop: it records the call (verb and node)
// and puts iid on node in state, refused as method when node does not
// hold it.
func (f *fakeCluster) setLifecycle(verb string, method ctl.Method, node, iid, state string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, verb+" "+node)
	h, err := f.host(node)
	if err != nil {
		return err
	}
	if verb == "start" && h.startErr != nil {
		return &ctl.CallError{Class: ctl.ClassRefused, Method: method, Refusal: h.startErr, Err: h.startErr}
	}
	in, ok := h.instances[iid]
	if !ok {
		r := ctl.NewRefusal(ctl.CodeUnknownInstance, "no such instance")
		return &ctl.CallError{Class: ctl.ClassRefused, Method: method, Refusal: r, Err: r}
	}
	in.Lifecycle = state
	h.instances[iid] = in
	return nil
}

func (f *fakeCluster) Unload(_ context.Context, node, iid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "unload "+node)
	h, err := f.host(node)
	if err != nil {
		return err
	}
	if h.unloadErr != nil {
		return &ctl.CallError{Class: ctl.ClassRefused, Method: ctl.MethodUnload, Refusal: h.unloadErr, Err: h.unloadErr}
	}
	if _, ok := h.instances[iid]; !ok {
		r := ctl.NewRefusal(ctl.CodeUnknownInstance, "no such instance")
		return &ctl.CallError{Class: ctl.ClassRefused, Method: ctl.MethodUnload, Refusal: r, Err: r}
	}
	delete(h.instances, iid)
	h.departed = append(h.departed, ctl.Departed{InstanceID: iid, Reason: ctl.DepartedUnloaded})
	return nil
}

// copies counts the instances of package id across the live (not
// killed) and killed hosts alike.
func (f *fakeCluster) copies(pkgID string) (n int, on []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.hosts {
		for _, in := range h.instances {
			if in.Package == pkgID {
				n++
				on = append(on, h.id)
			}
		}
	}
	slices.Sort(on)
	return n, on
}

// addPackage registers a package of kind needing memGiB of memory.
func (f *fakeCluster) addPackage(dir, id, kind string, memGiB uint64) {
	m := &pkg.Manifest{Schema: 1, ID: id, Version: "1.0.0", Kind: kind, Runtime: pkg.Runtime{Type: "process"},
		Variants: []pkg.Variant{{Name: "cpu", Resources: pkg.Resources{MemBytes: memGiB << 30}}}}
	f.mu.Lock()
	f.pkgs[dir] = &pkg.Verified{Manifest: m, ManifestHash: pkg.ManifestHash([]byte(id))}
	f.mu.Unlock()
}

// rig is a controller on a fake cluster with a real chain.
type rig struct {
	t       *testing.T
	clk     *clock
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

func newRig(t *testing.T, hosts ...uint64) (*rig, []*fakeHost) {
	t.Helper()
	clk := &clock{t: t0}
	cl := newCluster(clk)
	var hs []*fakeHost
	for i, mem := range hosts {
		hs = append(hs, cl.addHost(t, byte(i+1), mem))
	}
	cl.addPackage("/pkg/echo", "echo", pkg.KindService, 1)
	dir, ch, ck := testChain(t, clk)
	cfg := pairedServices()
	r := &rig{t: t, clk: clk, cl: cl, chain: ch, key: ck, state: filepath.Join(dir, "controller.json"), cfg: cfg,
		targets: cl.targets(engine.TrustPaired)}
	r.restart()
	return r, hs
}

// testChain is a chain in a new test directory, signed by test key 99,
// on clk; the test closes it. It returns the directory and the key too.
func testChain(t testing.TB, clk *clock) (string, *chain.Chain, ed25519.PrivateKey) {
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
	got, on := r.cl.copies(pkgID)
	if got != n {
		r.t.Fatalf("%d copies of %s (on %v), want %d", got, pkgID, on, n)
	}
	return on
}

var echo = Order{PackageDir: "/pkg/echo", Start: true}
