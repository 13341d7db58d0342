package planetest

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/pkg"
)

// Clock is a fake clock the test moves; its Now is a controller's
// Deps.Now.
type Clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

// NewClock returns a clock that reads t until it is moved.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// PlaceMode is how a node answers a place.
type PlaceMode int

const (
	PlaceOK              PlaceMode = iota // places and answers
	PlaceRefuse                           // refuses (admission)
	PlaceLostAfterActing                  // places, then the answer is lost
	PlaceLostNoAct                        // the answer is lost and nothing was placed
	PlaceInFlight                         // the answer is lost; status shows it in flight
)

// Host is one in-process node of the cluster: its workload host, as a
// controller sees it through its calls. Change its fields with
// Cluster.Set, Kill or Revive while a controller may be calling it.
type Host struct {
	ID        string
	Key       ed25519.PrivateKey
	Facts     facts.Facts
	Seq       uint64
	Down      bool // killed: every call is unreachable
	Frozen    bool // describe blocks until ctx ends
	StatusErr bool // status unreachable (while describe works)
	NoListing bool // describe carries no instance listing
	HostOff   bool // describe shows the host disabled (host.enabled false)
	NoHost    bool // describe carries no workload-host advertisement
	Place     PlaceMode
	UnloadErr *ctl.Refusal
	Instances map[string]ctl.InstanceStatus
	InFlight  []string
	Departed  []ctl.Departed
	// Meta is what the fake knows of each instance beyond its status.
	Meta map[string]InstMeta
	// StartAs is the state a started instance reports ("" = running).
	StartAs string
	// StartErr, when set, refuses every start (the instance stays as it
	// is).
	StartErr *ctl.Refusal
}

// InstMeta is an instance's declared workload (from its config) and
// package version.
type InstMeta struct{ Workload, Version string }

// Cluster is the nodes a controller calls: it answers plane.Dispatcher's
// calls (with a *pkg.Verified for a plane.Package and a Description for
// a plane.Description) as the nodes' workload hosts would. Mu guards its
// fields and its hosts'.
type Cluster struct {
	Clock *Clock
	Mu    sync.Mutex // guards everything below and the hosts
	Hosts map[string]*Host
	Pkgs  map[string]*pkg.Verified
	// Revoked holds the revocation each package dir is refused with.
	Revoked map[string]*pkg.VerifyError
	// Verifies counts VerifyPackage calls per dir.
	Verifies map[string]int
	// Calls lists the mutating calls in order, "<verb> <node>".
	Calls []string
	// A crash: when CrashArmed, the next place captures the state file
	// at CrashPath (CrashState, as the crash leaves it), reaches its node
	// or not (CrashActs), and from then on every call fails without
	// effect (Crashed) until the test restarts the controller.
	CrashArmed bool
	CrashActs  bool
	Crashed    bool
	CrashPath  string
	CrashState []byte
}

// NewCluster returns a cluster of no node on clk.
func NewCluster(clk *Clock) *Cluster {
	return &Cluster{Clock: clk, Hosts: map[string]*Host{}, Pkgs: map[string]*pkg.Verified{},
		Revoked: map[string]*pkg.VerifyError{}, Verifies: map[string]int{}}
}

// Key returns the node key of seed, and its node id: the same seed gives
// the same node.
func Key(seed byte) (ed25519.PrivateKey, string) {
	s := make([]byte, ed25519.SeedSize)
	s[0] = seed
	k := ed25519.NewKeyFromSeed(s)
	return k, identity.NodeID(k.Public().(ed25519.PublicKey))
}

// AddNode adds a node with the key of seed (Key), a Linux amd64 machine
// of 8 CPUs and 32 GiB, memGiB GiB of them free, and the process runtime.
func (f *Cluster) AddNode(t testing.TB, seed byte, memGiB uint64) *Host {
	t.Helper()
	k, id := Key(seed)
	fa := facts.Facts{
		OS: "linux", Arch: "amd64", CPUs: 8, MemTotalBytes: 32 << 30, MemFreeBytes: memGiB << 30,
		Runtimes: []string{"process"},
	}
	h := &Host{ID: id, Key: k, Facts: fa, Instances: map[string]ctl.InstanceStatus{}, Meta: map[string]InstMeta{}}
	f.Mu.Lock()
	f.Hosts[id] = h
	f.Mu.Unlock()
	return h
}

// Set changes h under the cluster's lock.
func (f *Cluster) Set(h *Host, fn func(h *Host)) {
	f.Mu.Lock()
	fn(h)
	f.Mu.Unlock()
}

// Kill makes every call to h unreachable, as a dead or cut-off node.
func (f *Cluster) Kill(h *Host) { f.Set(h, func(h *Host) { h.Down = true }) }

// Revive makes h answer again, with what it held when killed.
func (f *Cluster) Revive(h *Host) { f.Set(h, func(h *Host) { h.Down = false }) }

// Lookup returns node, or an unreachable *ctl.CallError when it is
// unknown or killed or the controller crashed. Call it with Mu held.
func (f *Cluster) Lookup(node string) (*Host, error) {
	if f.Crashed {
		return nil, &ctl.CallError{Class: ctl.ClassUnreachable, Err: errors.New("the controller crashed")}
	}
	h, ok := f.Hosts[node]
	if !ok || h.Down {
		return nil, &ctl.CallError{Class: ctl.ClassUnreachable, Err: errors.New("no link")}
	}
	return h, nil
}

// Listing is h's status listing, instances by id. Call it with Mu held.
func (f *Cluster) Listing(h *Host) ctl.StatusList {
	st := ctl.StatusList{InFlight: slices.Clone(h.InFlight), Departed: slices.Clone(h.Departed)}
	for _, in := range h.Instances {
		st.Instances = append(st.Instances, in)
	}
	slices.SortFunc(st.Instances, func(a, b ctl.InstanceStatus) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	return st
}

// Description is plane.Description, field for field, so that a test
// converts one into the other.
type Description struct {
	Facts    facts.Signed
	Status   *ctl.StatusList
	Host     *ctl.HostMetadata
	HostNote string
}

// Describe answers a describe: node's facts signed now, its host and its
// listing; a frozen node answers when ctx ends.
func (f *Cluster) Describe(ctx context.Context, node string) (Description, error) {
	f.Mu.Lock()
	h, err := f.Lookup(node)
	frozen := err == nil && h.Frozen
	f.Mu.Unlock()
	if err != nil {
		return Description{}, err
	}
	if frozen {
		<-ctx.Done()
		return Description{}, &ctl.CallError{Class: ctl.ClassUnreachable, Err: ctx.Err()}
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	h.Seq++
	s, err := facts.Sign(h.Key, h.Facts, h.Seq, f.Clock.Now(), 5*time.Minute)
	if err != nil {
		return Description{}, err
	}
	d := Description{Facts: s}
	if h.NoHost {
		d.HostNote = "its describe shows no workload host"
	} else {
		d.Host = &ctl.HostMetadata{Instances: len(h.Instances), InFlight: len(h.InFlight), Enabled: !h.HostOff}
	}
	if !h.NoListing {
		st := f.Listing(h)
		d.Status = &st
	}
	return d, nil
}

// VerifyPackage returns the package AddPackage put at dir, or its
// revocation.
func (f *Cluster) VerifyPackage(_ context.Context, dir string) (*pkg.Verified, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Verifies[dir]++
	if r := f.Revoked[dir]; r != nil {
		return nil, fmt.Errorf("package %s: %w", dir, r)
	}
	v, ok := f.Pkgs[dir]
	if !ok {
		return nil, fmt.Errorf("no package at %s", dir)
	}
	return v, nil
}

// PlaceDecided answers a place as node's Place mode says.
func (f *Cluster) PlaceDecided(_ context.Context, node string, v *pkg.Verified, variant string, cfg ctl.InstanceConfig, start bool, decisionID string) (ctl.PlaceResult, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Calls = append(f.Calls, "place "+node)
	armed := f.CrashArmed
	if armed {
		b, err := os.ReadFile(f.CrashPath)
		if err != nil {
			return ctl.PlaceResult{}, err
		}
		f.CrashArmed, f.CrashState = false, b
	}
	h, err := f.Lookup(node)
	if err != nil {
		f.Crashed = f.Crashed || armed
		return ctl.PlaceResult{}, err
	}
	iid := ctl.InstanceID(v.Manifest.ID, v.Manifest.Version, variant, v.ManifestHash, cfg, node)
	state := ctl.StateLoaded
	if start {
		state = ctl.StateRunning
		if h.StartAs != "" {
			state = h.StartAs
		}
	}
	act := func() {
		h.Instances[iid] = ctl.InstanceStatus{InstanceID: iid, Package: v.Manifest.ID, Variant: variant, DecisionID: decisionID, Lifecycle: state}
		h.Meta[iid] = InstMeta{Workload: cfg.Workload, Version: v.Manifest.Version}
		h.Departed = slices.DeleteFunc(h.Departed, func(d ctl.Departed) bool { return d.InstanceID == iid })
	}
	lost := &ctl.CallError{Class: ctl.ClassIndeterminate, Method: ctl.MethodPlace, Err: errors.New("answer lost")}
	if armed {
		if f.CrashActs && h.Place != PlaceRefuse {
			act()
		}
		f.Crashed = true
		return ctl.PlaceResult{}, lost
	}
	switch h.Place {
	case PlaceRefuse:
		r := ctl.NewRefusal(ctl.CodeAdmission, "no room")
		return ctl.PlaceResult{}, &ctl.CallError{Class: ctl.ClassRefused, Method: ctl.MethodPlace, Refusal: r, Err: r}
	case PlaceLostAfterActing:
		act()
		return ctl.PlaceResult{}, lost
	case PlaceLostNoAct:
		return ctl.PlaceResult{}, lost
	case PlaceInFlight:
		h.InFlight = append(h.InFlight, decisionID)
		return ctl.PlaceResult{}, lost
	}
	act()
	return ctl.PlaceResult{InstanceID: iid, Variant: variant, Package: v.Manifest.ID, Node: node, Status: ctl.InstanceState{State: state}}, nil
}

// Status answers a status listing.
func (f *Cluster) Status(_ context.Context, node string) (ctl.StatusList, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	h, err := f.Lookup(node)
	if err != nil {
		return ctl.StatusList{}, err
	}
	if h.StatusErr {
		return ctl.StatusList{}, &ctl.CallError{Class: ctl.ClassUnreachable, Err: errors.New("status lost")}
	}
	return f.Listing(h), nil
}

// Start answers a start.
func (f *Cluster) Start(_ context.Context, node, iid string) error {
	return f.setLifecycle("start", ctl.MethodStart, node, iid, ctl.StateRunning)
}

// Stop answers a stop.
func (f *Cluster) Stop(_ context.Context, node, iid string) error {
	return f.setLifecycle("stop", ctl.MethodStop, node, iid, ctl.StateStopped)
}

// setLifecycle is Start and Stop: it records the call (verb and node)
// and puts iid on node in state, refused as method when node does not
// hold it.
func (f *Cluster) setLifecycle(verb string, method ctl.Method, node, iid, state string) error {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Calls = append(f.Calls, verb+" "+node)
	h, err := f.Lookup(node)
	if err != nil {
		return err
	}
	if verb == "start" && h.StartErr != nil {
		return &ctl.CallError{Class: ctl.ClassRefused, Method: method, Refusal: h.StartErr, Err: h.StartErr}
	}
	in, ok := h.Instances[iid]
	if !ok {
		r := ctl.NewRefusal(ctl.CodeUnknownInstance, "no such instance")
		return &ctl.CallError{Class: ctl.ClassRefused, Method: method, Refusal: r, Err: r}
	}
	in.Lifecycle = state
	h.Instances[iid] = in
	return nil
}

// Unload answers an unload.
func (f *Cluster) Unload(_ context.Context, node, iid string) error {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Calls = append(f.Calls, "unload "+node)
	h, err := f.Lookup(node)
	if err != nil {
		return err
	}
	if h.UnloadErr != nil {
		return &ctl.CallError{Class: ctl.ClassRefused, Method: ctl.MethodUnload, Refusal: h.UnloadErr, Err: h.UnloadErr}
	}
	if _, ok := h.Instances[iid]; !ok {
		r := ctl.NewRefusal(ctl.CodeUnknownInstance, "no such instance")
		return &ctl.CallError{Class: ctl.ClassRefused, Method: ctl.MethodUnload, Refusal: r, Err: r}
	}
	delete(h.Instances, iid)
	h.Departed = append(h.Departed, ctl.Departed{InstanceID: iid, Reason: ctl.DepartedUnloaded})
	return nil
}

// Copies counts the instances of package id across the live (not
// killed) and killed hosts alike.
func (f *Cluster) Copies(pkgID string) (n int, on []string) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	for _, h := range f.Hosts {
		for _, in := range h.Instances {
			if in.Package == pkgID {
				n++
				on = append(on, h.ID)
			}
		}
	}
	slices.Sort(on)
	return n, on
}

// AddPackage registers a package of kind needing memGiB of memory.
func (f *Cluster) AddPackage(dir, id, kind string, memGiB uint64) {
	m := &pkg.Manifest{Schema: 1, ID: id, Version: "1.0.0", Kind: kind, Runtime: pkg.Runtime{Type: "process"},
		Variants: []pkg.Variant{{Name: "cpu", Resources: pkg.Resources{MemBytes: memGiB << 30}}}}
	f.Mu.Lock()
	f.Pkgs[dir] = &pkg.Verified{Manifest: m, ManifestHash: pkg.ManifestHash([]byte(id))}
	f.Mu.Unlock()
}
