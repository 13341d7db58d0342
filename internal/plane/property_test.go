package plane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// TestPropertyOneCopy drives a three-node cluster through random kills,
// returns, reboots, lost answers, refusals, flaky status listings,
// restarts, crashes in the middle of a place and ticks (propertySeeds
// runs, each reproducible from its seed, which a failure names with the
// actions taken). After every tick no workload runs twice on the nodes that
// answer (a returning node's replaced copy is unloaded in the tick that
// sees it return), and once every node is back and behaves, exactly the
// placement the controller holds runs, once.
func TestPropertyOneCopy(t *testing.T) {
	for seed := range uint64(propertySeeds) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { onePropertyRun(t, seed) })
	}
}

// propertySeeds is how many random runs TestPropertyOneCopy makes.
const propertySeeds = 24

func onePropertyRun(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 0x706c616e65))
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d after %v: %s", seed, log, fmt.Sprintf(format, args...))
	}
	r, hs := propertyRig(t)
	r.restart()
	r.tick()
	r.place(echo)
	for range 1 + rnd.IntN(32) {
		i := rnd.IntN(len(hs))
		switch op := rnd.IntN(10); op {
		case 0, 1, 2, 3, 4, 5:
			r.fault(rnd, &log, hs, i, fault(op))
		case 6:
			// Kill the node that holds the instance: the move is what
			// the invariant is about.
			for _, p := range r.c.Placements() {
				if p.Life == LifePlaced {
					log = append(log, "kill the holder")
					r.cl.Set(hostOf(hs, p.Node), func(h *planetest.Host) { h.Down = true })
				}
			}
		case 7:
			r.fault(rnd, &log, hs, i, faultReboot)
		default:
			r.randomTick(rnd, &log, fail)
			if n := r.liveCopies("echo"); n > 1 {
				fail("%d copies on the answering nodes", n)
			}
		}
	}
	// Heal: every node back and well behaved.
	r.cl.disarmCrash()
	for _, h := range hs {
		r.cl.Set(h, func(h *planetest.Host) { h.Down = false; h.Place = planetest.PlaceOK; h.StatusErr = false })
	}
	for range 12 {
		r.clk.Advance(r.cfg.Tick)
		if err := r.c.Tick(context.Background()); err != nil {
			fail("Tick: %v", err)
		}
	}
	placed := 0
	var node string
	for _, p := range r.c.Placements() {
		if p.Life == LifePlaced {
			placed++
			node = p.Node
		}
	}
	n, on := r.cl.Copies("echo")
	if placed > 1 || n != placed || (n == 1 && on[0] != node) {
		fail("healed: %d placed (on %s), %d copies on %v; placements %+v", placed, node, n, on, r.c.Placements())
	}
}

// propertyRig is a rig of three nodes for a random run, with an
// in-memory chain and a state file on a memory file system: the fsyncs
// would make the runs slow, and they are not what is tested.
func propertyRig(t *testing.T) (*rig, []*planetest.Host) {
	t.Helper()
	r, hs := newRig(t, 8, 8, 8)
	r.app = &memChain{}
	r.state = shmPath(t)
	return r, hs
}

// fault is one of the faults the random runs inflict on a node or the
// controller.
type fault int

const (
	faultKill    fault = iota // the node stops answering
	faultRevive               // it answers again
	faultMode                 // its place calls behave in a mode drawn from placeModes
	faultRestart              // the controller restarts
	faultCrash                // the controller crashes at the next place (acting or not: drawn)
	faultFlaky                // the node's status listing fails, or works again
	faultReboot               // the node forgets its instances
)

// placeModes are the modes faultMode draws from.
var placeModes = []planetest.PlaceMode{planetest.PlaceOK, planetest.PlaceRefuse, planetest.PlaceLostAfterActing, planetest.PlaceLostNoAct}

// fault inflicts f on hs[i] (or the controller), drawing what it needs
// from rnd, and logs it.
func (r *rig) fault(rnd *rand.Rand, log *[]string, hs []*planetest.Host, i int, f fault) {
	h := hs[i]
	switch f {
	case faultKill:
		*log = append(*log, fmt.Sprint("kill ", i))
		r.cl.Kill(h)
	case faultRevive:
		*log = append(*log, fmt.Sprint("revive ", i))
		r.cl.Revive(h)
	case faultMode:
		m := placeModes[rnd.IntN(len(placeModes))]
		*log = append(*log, fmt.Sprint("mode ", i, " ", m))
		r.cl.Set(h, func(h *planetest.Host) { h.Place = m })
	case faultRestart:
		*log = append(*log, "restart")
		r.restart()
	case faultCrash:
		acts := rnd.IntN(2) == 0
		*log = append(*log, fmt.Sprint("crash at the next place, acts ", acts))
		r.cl.Mu.Lock()
		r.cl.CrashArmed, r.cl.CrashActs, r.cl.CrashPath = true, acts, r.state
		r.cl.Mu.Unlock()
	case faultFlaky:
		*log = append(*log, fmt.Sprint("status flaky ", i))
		r.cl.Set(h, func(h *planetest.Host) { h.StatusErr = !h.StatusErr })
	case faultReboot:
		*log = append(*log, fmt.Sprint("reboot ", i))
		r.cl.Set(h, func(h *planetest.Host) { clear(h.Instances) })
	default:
		r.t.Fatalf("no fault %d", f)
	}
}

// randomTick advances the clock by 1, 2 or 7 ticks (drawn from rnd),
// ticks, and restarts the controller if a crash was armed and happened
// (crashRestart): it says whether it did. fail reports a Tick error.
func (r *rig) randomTick(rnd *rand.Rand, log *[]string, fail func(string, ...any)) bool {
	r.t.Helper()
	n := []int{1, 1, 2, 7}[rnd.IntN(4)]
	*log = append(*log, fmt.Sprint("tick ", n))
	r.clk.Advance(r.cfg.Tick * time.Duration(n))
	if err := r.c.Tick(context.Background()); err != nil {
		fail("Tick: %v", err)
	}
	crashed := r.crashRestart()
	if crashed {
		*log = append(*log, "crashed")
	}
	return crashed
}

// disarmCrash takes back a crash armed by faultCrash that has not
// happened.
func (f *fakeCluster) disarmCrash() {
	f.Mu.Lock()
	f.CrashArmed = false
	f.Mu.Unlock()
}

// memChain is an in-memory Appender whose hashes are distinct.
type memChain struct {
	mu sync.Mutex // guards n
	n  int
}

func (m *memChain) Append(source, kind string, _ any) (chain.Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	sum := sha256.Sum256([]byte(fmt.Sprint(m.n, source, kind)))
	return chain.Entry{Seq: uint64(m.n), Source: source, Kind: kind, Hash: hex.EncodeToString(sum[:])}, nil
}

// shmPath is a state file path on a memory file system when there is one
// (fsyncs cost nothing there), else in the test's directory.
func shmPath(t *testing.T) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "plane-prop-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return filepath.Join(dir, "controller.json")
		}
	}
	return filepath.Join(t.TempDir(), "controller.json")
}

// crashRestart, after a crash in the last tick, puts back the state file
// as the crash left it and restarts the controller.
func (r *rig) crashRestart() bool {
	r.t.Helper()
	r.cl.Mu.Lock()
	crashed, state := r.cl.Crashed, r.cl.CrashState
	r.cl.Crashed = false
	r.cl.Mu.Unlock()
	if !crashed {
		return false
	}
	if err := os.WriteFile(r.state, state, StateFileMode); err != nil {
		r.t.Fatal(err)
	}
	r.restart()
	return true
}

// TestPropertyDeclared drives a declared workload on three nodes through
// the random events of TestPropertyOneCopy plus changes of its replica
// count, new versions in the store, and instances that start unhealthy
// (propertySeeds runs, reproducible from the seed). After every tick the
// controller holds at most one placement per (workload, replica) (an
// upgrade's new instance and the one it supersedes count as one), and
// every instance on a node that answers belongs to a placement it holds
// on that node. Once every node is back and behaves, exactly Replicas
// instances run, on distinct nodes, at the newest version, one per
// placement.
func TestPropertyDeclared(t *testing.T) {
	for seed := range uint64(propertySeeds) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { oneDeclaredRun(t, seed) })
	}
}

func oneDeclaredRun(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 0x6465636c))
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d after %v: %s", seed, log, fmt.Sprintf(format, args...))
	}
	r, hs := propertyRig(t)
	r.cfg.MaxReschedules = 1000 // the cap would strand a replica; not what is tested
	versions := []string{"1.0.0"}
	r.addVersion("echo", versions[0], 1, nil)
	w := chat
	w.Replicas = 1 + rnd.IntN(3)
	r.cfg.Workloads = []Workload{w}
	r.restart()
	check := func() {
		t.Helper()
		if err := declaredInvariant(r, "chat"); err != nil {
			fail("%v", err)
		}
	}
	for range 1 + rnd.IntN(40) {
		i := rnd.IntN(len(hs))
		h := hs[i]
		switch op := rnd.IntN(13); op {
		case 0, 1, 2, 4, 5, 6:
			r.fault(rnd, &log, hs, i, fault(op))
		case 3:
			r.fault(rnd, &log, hs, i, faultRestart)
			check()
		case 7:
			w.Replicas = 1 + rnd.IntN(3)
			log = append(log, fmt.Sprint("replicas ", w.Replicas))
			r.cfg.Workloads = []Workload{w}
			if err := r.c.ApplyConfig(r.cfg); err != nil {
				fail("ApplyConfig: %v", err)
			}
		case 8:
			v := fmt.Sprintf("1.%d.0", len(versions))
			versions = append(versions, v)
			log = append(log, "version "+v)
			r.addVersion("echo", v, 1, nil)
		case 9:
			s := []string{"", ctl.StateUnhealthy}[rnd.IntN(2)]
			log = append(log, fmt.Sprintf("start as %q on %d", s, i))
			r.cl.Set(h, func(h *planetest.Host) { h.StartAs = s })
		default:
			if rnd.IntN(3) == 0 {
				log = append(log, "healthy")
				for _, v := range versions {
					r.setState(v, ctl.StateRunning)
				}
			}
			crashed := r.randomTick(rnd, &log, fail)
			check()
			if !crashed {
				if err := noStrayCopies(r, "chat"); err != nil {
					fail("%v", err)
				}
			}
		}
	}
	// Heal: every node back and well behaved, every instance healthy.
	r.cl.disarmCrash()
	for _, h := range hs {
		r.cl.Set(h, func(h *planetest.Host) {
			h.Down = false
			h.Place = planetest.PlaceOK
			h.StatusErr = false
			h.StartAs = ""
		})
	}
	newest := versions[len(versions)-1]
	var why error
	for range 150 {
		for _, v := range versions {
			r.setState(v, ctl.StateRunning)
		}
		r.clk.Advance(r.cfg.Tick)
		if err := r.c.Tick(context.Background()); err != nil {
			fail("Tick: %v", err)
		}
		check()
		if why = settledDeclared(r, "chat", w.Replicas, newest); why == nil {
			return
		}
	}
	fail("not settled: %v; placements %+v", why, r.c.Placements())
}

// declaredInvariant: at most one placement holds each replica of name,
// an upgrade's pair (new, superseded) and a reschedule's pair (the
// replacement being placed, the lost one it replaces) counting as one.
func declaredInvariant(r *rig, name string) error {
	ps := r.c.Placements()
	superseded := map[string]bool{}
	for _, p := range ps {
		if p.Supersedes != "" {
			superseded[p.Supersedes] = true
		}
		if p.Replaces != "" {
			superseded[p.Replaces] = true
		}
	}
	holders := map[int][]string{}
	for _, p := range ps {
		if p.Declared != name || superseded[p.DecisionID] {
			continue
		}
		switch p.Life {
		case LifeDispatching, LifeUnsettled, LifePlaced, LifeLost:
			holders[p.Replica] = append(holders[p.Replica], p.DecisionID[:8]+" "+string(p.Life))
		}
	}
	for rep, hs := range holders {
		if len(hs) > 1 {
			return fmt.Errorf("replica %d held by %v", rep, hs)
		}
	}
	return nil
}

// noStrayCopies: every instance of name on a node that answers belongs to
// a placement the controller holds on that node.
func noStrayCopies(r *rig, name string) error {
	known := map[string]bool{}
	for _, p := range r.c.Placements() {
		known[p.Node+" "+p.InstanceID] = true
	}
	for _, c := range r.liveOf(name) {
		if !known[c.node+" "+c.iid] {
			return fmt.Errorf("instance %s on %s is unknown to the controller", c.iid, c.node)
		}
	}
	return nil
}

// settledDeclared reports why name is not settled at replicas instances
// of version, nil when it is.
func settledDeclared(r *rig, name string, replicas int, version string) error {
	cs := r.instancesOf(name)
	if len(cs) != replicas || !distinct(nodesOf(cs)) {
		return fmt.Errorf("instances %+v, want %d on distinct nodes", cs, replicas)
	}
	placed := map[string]bool{}
	for _, p := range r.c.Placements() {
		if p.Declared != name {
			continue
		}
		if p.Life != LifePlaced || p.Supersedes != "" || p.Replica >= replicas {
			return fmt.Errorf("placement %s %s replica %d supersedes %q", p.DecisionID[:8], p.Life, p.Replica, p.Supersedes)
		}
		placed[p.Node+" "+p.InstanceID] = true
	}
	for _, c := range cs {
		if c.version != version || !placed[c.node+" "+c.iid] {
			return fmt.Errorf("instance %+v: want version %s, one per placement", c, version)
		}
	}
	if len(placed) != replicas {
		return fmt.Errorf("%d placements, want %d", len(placed), replicas)
	}
	return nil
}
