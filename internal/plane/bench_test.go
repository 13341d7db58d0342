package plane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// The controller benchmarks run the real controller (real chain file,
// real controller.json in t.TempDir()) over the fake cluster of
// fake_test.go: 100 nodes with realistic signed facts (about 30
// capability records, 0 to 4 GPUs) and 1,000 placed instances, 10 a
// node. The fake's host-side work (signing each node's facts) is done
// with the timer stopped: what is measured is the controller's side.

const (
	benchNodes      = 100
	benchPlacements = 1000
	benchPackages   = 10
)

// cpuClock accumulates the process's CPU time (user + system, getrusage)
// over the timed sections of a benchmark, so the figure is steady on a
// shared, loaded machine where wall time is not.
type cpuClock struct {
	total time.Duration
	start time.Duration
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (c *cpuClock) Start() { c.start = cpuNow() }
func (c *cpuClock) Stop()  { c.total += cpuNow() - c.start }

func (c *cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(c.total.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// benchFacts is a node's facts as its probe would sign them: host memory,
// CPU, OS, runtimes, labels, network, disks, measured serving speed, and
// gpus GPUs with their VRAM; about 30 capability records.
func benchFacts(i, gpus int) facts.Facts {
	const gib = 1 << 30
	probed, measured, claimed := grammar.ProvenanceProbed, grammar.ProvenanceMeasured, grammar.ProvenanceClaimed
	avail, busy := grammar.StateAvailable, grammar.StateBusy
	in, s, fl := grammar.IntValue, grammar.StringValue, grammar.FloatValue
	f := facts.Facts{
		Hostname: fmt.Sprintf("node-%03d", i), OS: "linux", Arch: "amd64", Kernel: "6.1.0-18-amd64", CPUs: 64,
		MemTotalBytes: 512 * gib, MemFreeBytes: 384 * gib, Runtimes: []string{"llama.cpp", "process"},
		Labels: map[string]string{"rack": fmt.Sprintf("r%d", i%20), "zone": fmt.Sprintf("z%d", i%4), "team": "ml"},
	}
	caps := []facts.Capability{
		capRecord("os.linux", probed, avail, gv{"kernel": s("6.1.0-18-amd64")}),
		capRecord("os.distro.debian", probed, avail, gv{"version": in(12)}),
		capRecord("cpu.arch.amd64", probed, avail, gv{"name": s("amd64")}),
		capRecord("cpu.cores", probed, avail, gv{"count": in(64)}),
		capRecord("cpu.model.epyc", probed, avail, gv{"name": s("AMD EPYC 7443")}),
		capRecord("cpu.features.avx2", probed, avail, nil),
		capRecord("cpu.features.avx512", probed, avail, nil),
		capRecord("mem.system", probed, avail, gv{"total": in(512 * gib), "free": in(384 * gib)}),
		capRecord("runtime.process", probed, avail, nil),
		capRecord("runtime.llamacpp", probed, avail, gv{"name": s("llama.cpp"), "version": s("b4100")}),
		capRecord("label.rack", claimed, avail, gv{"value": s(f.Labels["rack"])}),
		capRecord("label.zone", claimed, avail, gv{"value": s(f.Labels["zone"])}),
		capRecord("label.team", claimed, avail, gv{"value": s("ml")}),
		capRecord("net.iface.eth0", probed, avail, gv{"speed_mbps": in(25000)}),
		capRecord("disk.nvme.0", probed, avail, gv{"bytes": in(2 << 40)}),
		capRecord("disk.nvme.1", probed, avail, gv{"bytes": in(2 << 40)}),
		capRecord("perf.infer.chat", measured, avail, gv{"metric": s("ttfb_ms"), "value": fl(41.5 + float64(i%7)), "samples": in(20)}),
		capRecord("perf.infer.embed", measured, avail, gv{"metric": s("ttfb_ms"), "value": fl(4.5), "samples": in(20)}),
		capRecord("node.class.server", claimed, avail, nil),
	}
	for g := range gpus {
		state := avail
		if g == 0 && i%3 == 0 {
			state = busy
		}
		mem := int64([]int{24, 48, 80}[(i+g)%3]) * gib
		f.GPUs = append(f.GPUs, facts.GPU{Index: g, Name: "NVIDIA A100", VRAMTotalBytes: uint64(mem), VRAMFreeBytes: uint64(mem) / 2})
		caps = append(caps,
			capRecord(fmt.Sprintf("accel.gpu.nvidia.a100-%d", g), probed, state, gv{"index": in(int64(g)), "mem_bytes": in(mem), "cuda": grammar.BoolValue(true)}),
			capRecord("mem.vram", probed, avail, gv{"index": in(int64(g)), "total": in(mem), "free": in(mem / 2)}))
	}
	for n := 0; len(caps) < 30; n++ {
		caps = append(caps, capRecord(fmt.Sprintf("feature.x%d.enabled", n), claimed, avail, nil))
	}
	f.Capabilities = caps
	return f
}

// benchDispatcher is the fake cluster with each node's facts signed ahead
// of the describe that returns them (presign, timer stopped): a host
// signs its own facts, so the signing is not the controller's cost.
type benchDispatcher struct {
	*fakeCluster
	signed map[string]facts.Signed
}

func (d *benchDispatcher) Describe(ctx context.Context, node string) (Description, error) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	h, err := d.Lookup(node)
	if err != nil {
		return Description{}, err
	}
	st := d.Listing(h)
	return Description{Facts: d.signed[node], Status: &st, Host: &ctl.HostMetadata{Instances: len(h.Instances), Enabled: true}}, nil
}

// presign signs every host's facts with its next seq at the clock's now.
func (d *benchDispatcher) presign(b *testing.B) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	for id, h := range d.Hosts {
		h.Seq++
		s, err := facts.Sign(h.Key, h.Facts, h.Seq, d.Clock.Now(), 5*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		d.signed[id] = s
	}
}

// benchRig is a controller over benchNodes nodes holding benchPlacements
// placed instances.
type benchRig struct {
	clk   *planetest.Clock
	cl    *fakeCluster
	d     *benchDispatcher
	chain *chain.Chain
	cfg   Config
	ts    []Target
	state string
	// placements and instances are the starting placements and each
	// host's instances, to start again from (restore).
	placements []*Placement
	instances  map[string]map[string]ctl.InstanceStatus
	c          *Controller
}

func newBenchRig(b *testing.B) *benchRig {
	b.Helper()
	clk := planetest.NewClock(t0)
	cl := newCluster(clk)
	ids := make([]string, 0, benchNodes)
	for i := range benchNodes {
		h := cl.AddNode(b, byte(101+i), 0)
		h.Facts = benchFacts(i, i%5)
		ids = append(ids, h.ID)
	}
	for k := range benchPackages {
		cl.AddPackage(fmt.Sprintf("/pkg/svc%d", k), fmt.Sprintf("svc%d", k), pkg.KindService, 1)
	}
	cl.AddPackage("/pkg/bench", "bench", pkg.KindService, 1)

	dir, ch, _ := testChain(b, clk)
	cfg := pairedServices()

	// 1,000 placements, 10 a node, as the controller would have stored
	// them after placing each (the 100 eligible nodes were candidates).
	// They are put straight into the controller: placing them one by one
	// would rewrite a growing state file 3,000 times.
	ps := make([]*Placement, 0, benchPlacements)
	for i := range benchPlacements {
		node := ids[i%benchNodes]
		k := i % benchPackages
		dirK := fmt.Sprintf("/pkg/svc%d", k)
		v := cl.Pkgs[dirK]
		o := &Order{Name: fmt.Sprintf("svc%d-%d", k, i), PackageDir: dirK, Start: true,
			Config: ctl.InstanceConfig{Workload: fmt.Sprintf("w%d", i)}}
		sum := sha256.Sum256(fmt.Appendf(nil, "decision %d", i))
		pl := &Placement{
			DecisionID: hex.EncodeToString(sum[:]), Kind: pkg.KindService, Workload: o.Name, Package: v.Manifest.ID,
			Version: v.Manifest.Version, ManifestHash: v.ManifestHash, Life: LifePlaced, HostState: ctl.StateRunning,
			WasRunning: true, PlacedAt: t0.Add(-time.Hour), Order: o,
		}
		// Place walks the whole ranked list of eligible nodes (every
		// node here), and drops it once the instance is placed.
		for k := range benchNodes {
			pl.Candidates = append(pl.Candidates, Candidate{Node: ids[(i+k)%benchNodes], Variant: "cpu"})
		}
		pl.aim(v, 0)
		pl.Candidates = nil
		ps = append(ps, pl)
		h := cl.Hosts[node]
		h.Instances[pl.InstanceID] = ctl.InstanceStatus{InstanceID: pl.InstanceID, Package: v.Manifest.ID, Variant: "cpu",
			DecisionID: pl.DecisionID, Lifecycle: ctl.StateRunning}
		h.Meta[pl.InstanceID] = planetest.InstMeta{Workload: o.Config.Workload, Version: v.Manifest.Version}
	}
	r := &benchRig{clk: clk, cl: cl, d: &benchDispatcher{fakeCluster: cl, signed: map[string]facts.Signed{}}, chain: ch, cfg: cfg,
		ts: cl.targets(engine.TrustPaired), state: filepath.Join(dir, "controller.json"), placements: ps,
		instances: map[string]map[string]ctl.InstanceStatus{}}
	for id, h := range cl.Hosts {
		r.instances[id] = cloneInstances(h.Instances)
	}
	r.restore(b)
	return r
}

func cloneInstances(m map[string]ctl.InstanceStatus) map[string]ctl.InstanceStatus {
	out := make(map[string]ctl.InstanceStatus, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// restore starts again from the starting state: every host up with its
// 10 instances, a new controller holding the 1,000 placements that has
// heard every node once (steady state).
func (r *benchRig) restore(b *testing.B) {
	b.Helper()
	r.cl.Mu.Lock()
	for id, h := range r.cl.Hosts {
		h.Down = false
		h.Instances = cloneInstances(r.instances[id])
		h.Departed = nil
	}
	r.cl.Mu.Unlock()
	if err := os.Remove(r.state); err != nil && !os.IsNotExist(err) {
		b.Fatal(err)
	}
	c, err := New(r.cfg, r.ts, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: r.d, StatePath: r.state})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range r.placements {
		cp := p.clone()
		c.placements[cp.DecisionID] = &cp
	}
	r.c = c
	r.tick(b)
	if n := len(r.c.Placements()); n != benchPlacements {
		b.Fatalf("%d placements, want %d", n, benchPlacements)
	}
}

// tick advances the clock one tick, signs the hosts' facts, and runs
// Controller.Tick; only the Tick is timed (by the caller).
func (r *benchRig) tick(b *testing.B) {
	b.Helper()
	r.clk.Advance(r.cfg.Tick)
	r.d.presign(b)
	if err := r.c.Tick(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// timedTick is one tick with the timer and cpu running: it starts both
// and stops cpu (the timer runs on).
func (r *benchRig) timedTick(b *testing.B, cpu *cpuClock) {
	b.StartTimer()
	cpu.Start()
	if err := r.c.Tick(context.Background()); err != nil {
		b.Fatal(err)
	}
	cpu.Stop()
}

// cpuLoop runs op b.N times (given the iteration) with allocations
// reported, timed from here, and reports the process's CPU time per op.
func cpuLoop(b *testing.B, op func(i int)) {
	var cpu cpuClock
	b.ReportAllocs()
	b.ResetTimer()
	cpu.Start()
	for i := range b.N {
		op(i)
	}
	cpu.Stop()
	cpu.report(b)
}

// BenchmarkTick is one lifecycle tick over 100 nodes and 1,000
// placements. steady: every node alive and every instance running as
// placed. dead10: 10 nodes have been silent for dead_after, so their 100
// placements are lost and rescheduled in this tick (each one a decision,
// chained and persisted, and a place on another node).
func BenchmarkTick(b *testing.B) {
	b.Run("steady", func(b *testing.B) {
		r := newBenchRig(b)
		var cpu cpuClock
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			r.clk.Advance(r.cfg.Tick)
			r.d.presign(b)
			r.timedTick(b, &cpu)
		}
		b.StopTimer()
		cpu.report(b)
		if n, _ := r.cl.Copies("svc0"); n != benchPlacements/benchPackages {
			b.Fatalf("%d copies of svc0", n)
		}
	})
	b.Run("dead10", func(b *testing.B) {
		r := newBenchRig(b)
		var cpu cpuClock
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			r.restore(b)
			// Ten nodes go down; one more tick past dead_after makes them
			// dead.
			var down []string
			r.cl.Mu.Lock()
			for i, t := range r.ts {
				if i%10 == 3 {
					r.cl.Hosts[t.ID].Down = true
					down = append(down, t.ID)
				}
			}
			r.cl.Mu.Unlock()
			r.clk.Advance(r.cfg.DeadAfter)
			r.d.presign(b)
			r.timedTick(b, &cpu)
			b.StopTimer()
			moved := 0
			for _, p := range r.c.Placements() {
				if p.Life == LifePlaced && p.Replaces != "" {
					moved++
				}
			}
			if moved != 10*len(down) {
				b.Fatalf("%d placements moved off %d dead nodes, want %d", moved, len(down), 10*len(down))
			}
			b.StartTimer()
		}
		b.StopTimer()
		cpu.report(b)
	})
}

// BenchmarkPlacePath is the cost of Controller.Place beyond the engine, on
// the steady cluster of BenchmarkTick:
//
//   - controller: Controller.Place of a one-replica service: package
//     (the fake's VerifyPackage, a map lookup standing for the
//     dispatcher's verified-package cache), governance, view, engine,
//     the decision chained, controller.json persisted, the place sent to
//     the fake and the result chained and persisted. The new placement is
//     removed again untimed, so every op starts from 1,000.
//   - engine: engine.Place on the same request and view.
//   - view: building the view (Controller.view) alone.
//   - chain-append: one decision record appended to the chain (fsync).
//   - persist: writing controller.json with its 1,000 placements once
//     (one placement changed each time, so that it is written).
func BenchmarkPlacePath(b *testing.B) {
	r := newBenchRig(b)
	o := Order{PackageDir: "/pkg/bench", Start: true}
	b.Run("controller", func(b *testing.B) {
		var cpu cpuClock
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			cpu.Start()
			rep, err := r.c.Place(context.Background(), o)
			cpu.Stop()
			if err != nil || rep.Placed == nil {
				b.Fatalf("Place: %v %+v", err, rep)
			}
			b.StopTimer()
			r.c.mu.Lock()
			delete(r.c.placements, rep.DecisionID)
			r.c.mu.Unlock()
			r.cl.Mu.Lock()
			delete(r.cl.Hosts[rep.Placed.Node].Instances, rep.Placed.InstanceID)
			r.cl.Mu.Unlock()
			b.StartTimer()
		}
		b.StopTimer()
		cpu.report(b)
	})
	p, err := r.d.VerifyPackage(context.Background(), o.PackageDir)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("engine", func(b *testing.B) {
		req, _, err := r.c.rec.evaluate(p, o, intent{reason: "operator"}, r.clk.Now())
		if err != nil {
			b.Fatal(err)
		}
		nodes := r.c.rec.view(r.clk.Now(), pkg.KindService, req.Name)
		cpuLoop(b, func(int) {
			dec, err := engine.Place(req, nodes, engine.Cluster{}, r.cfg.Weights)
			if err != nil || dec.Chosen == nil {
				b.Fatalf("engine: %v", err)
			}
		})
	})
	b.Run("view", func(b *testing.B) {
		cpuLoop(b, func(int) {
			if n := r.c.rec.view(r.clk.Now(), pkg.KindService, "bench"); len(n) != benchNodes {
				b.Fatalf("%d nodes", len(n))
			}
		})
	})
	b.Run("chain-append", func(b *testing.B) {
		rec := decisionRecord{Workload: "bench", Kind: pkg.KindService, Package: "bench", Version: "1.0.0",
			ManifestHash: p.Verified().ManifestHash, Reason: "operator", Candidates: []string{}}
		for _, t := range r.ts {
			rec.Candidates = append(rec.Candidates, t.ID)
		}
		rec.Chosen, rec.Variant = rec.Candidates[0], "cpu"
		cpuLoop(b, func(int) {
			if _, err := r.c.w.appendChain(KindDecision, rec); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("persist", func(b *testing.B) {
		// One placement changes before each persist, so every persist
		// writes (persist skips a write that would change nothing).
		var pl *Placement
		for _, p := range r.c.placements {
			pl = p
			break
		}
		cpuLoop(b, func(i int) {
			r.c.mu.Lock()
			pl.Attempts = i % 2
			r.c.mu.Unlock()
			if err := r.c.w.persist(); err != nil {
				b.Fatal(err)
			}
		})
		fi, err := os.Stat(r.state)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(fi.Size()), "state-bytes")
	})
}

// jsonStore is a delta store that encodes each change as the
// replicated store frames an entry (JSON) and keeps nothing: what a
// save costs the controller before raft, and the entry's size.
type jsonStore struct{ last int }

func (*jsonStore) Load(context.Context) (State, error) { return State{}, nil }

func (s *jsonStore) Save(_ context.Context, ch StateChange) error {
	b, err := json.Marshal(&ch)
	s.last = len(b)
	return err
}

// BenchmarkStateWrite is one state write after one placement changed,
// at 1,000 and 10,000 placements (100 nodes, 20 packages, placed):
// file rewrites controller.json whole (today's store, with its encoding
// cache and fsync); delta computes the change (deltaCache) and encodes
// it as a raft entry (the replication and fsync of the entry are
// ctlraft's BenchmarkSaveCommit). It reports the bytes written a save
// (write-bytes) and the whole state's size (state-bytes: the file, or
// a Reset change, about a raft snapshot's).
func BenchmarkStateWrite(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, store := range []string{"file", "delta"} {
			b.Run(fmt.Sprintf("%s/%d", store, n), func(b *testing.B) {
				clk := planetest.NewClock(t0)
				dir, ch, _ := testChain(b, clk)
				js := &jsonStore{}
				deps := Deps{Now: clk.Now, Chain: ch, Dispatcher: newCluster(clk), StatePath: filepath.Join(dir, "controller.json")}
				if store == "delta" {
					deps.State = js
				}
				c, err := New(pairedServices(), nil, deps)
				if err != nil {
					b.Fatal(err)
				}
				c.mu.Lock()
				for i := range n {
					sum := sha256.Sum256(fmt.Appendf(nil, "decision %d", i))
					node := fmt.Sprintf("n-%016x", uint64(i%100)*0x9e3779b97f4a7c15)
					o := &Order{Name: fmt.Sprintf("svc-%d", i), PackageDir: fmt.Sprintf("/pkg/svc%d", i%20), Start: true}
					c.placements[hex.EncodeToString(sum[:])] = &Placement{DecisionID: hex.EncodeToString(sum[:]), Kind: pkg.KindService,
						Workload: o.Name, Package: fmt.Sprintf("svc%d", i%20), Version: "1.0.0", ManifestHash: fmt.Sprintf("%064x", i%20),
						Life: LifePlaced, HostState: "running", WasRunning: true, PlacedAt: t0, Order: o, Node: node, Variant: "cpu",
						InstanceID: fmt.Sprintf("svc%d-1.0.0-%08x-%s", i%20, i, node), Reserved: Reservation{HostBytes: 1 << 30}}
				}
				var pl *Placement
				for _, p := range c.placements {
					pl = p
					break
				}
				c.mu.Unlock()
				if err := c.w.persist(); err != nil {
					b.Fatal(err)
				}
				state := js.last
				if store == "file" {
					fi, err := os.Stat(deps.StatePath)
					if err != nil {
						b.Fatal(err)
					}
					state = int(fi.Size())
				}
				cpuLoop(b, func(i int) {
					c.mu.Lock()
					pl.Attempts = i%2 + 1
					c.mu.Unlock()
					if err := c.w.persist(); err != nil {
						b.Fatal(err)
					}
				})
				written := js.last
				if store == "file" {
					written = state
				}
				b.ReportMetric(float64(written), "write-bytes")
				b.ReportMetric(float64(state), "state-bytes")
			})
		}
	}
}
