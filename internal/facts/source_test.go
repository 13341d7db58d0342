package facts

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/grammar"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// countingDeps returns the fake machine's deps with a probe counter.
func countingDeps(m *fakeMachine) (ProbeDeps, *atomic.Int32) {
	var probes atomic.Int32
	d := m.deps()
	d.Hostname = func() (string, error) {
		probes.Add(1)
		return "gpu-1", nil
	}
	return d, &probes
}

func newTestSource(t *testing.T, deps ProbeDeps, clock *fakeClock) *Source {
	t.Helper()
	seq, err := OpenSeqStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSource(deps, testKey(1), map[string]string{"rack": "a"}, seq, SourceOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSourceCachesAndReprobes(t *testing.T) {
	m := linuxMachine()
	deps, probes := countingDeps(m)
	clock := &fakeClock{now: t0}
	src := newTestSource(t, deps, clock)
	ctx := context.Background()

	verify := func(wantSeq uint64, wantFree uint64) {
		t.Helper()
		s, err := src.Signed(ctx)
		if err != nil {
			t.Fatalf("Signed: %v", err)
		}
		f, meta, err := Verify(s, pubOf(testKey(1)), clock.Now())
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if meta.Seq != wantSeq || !meta.IssuedAt.Equal(clock.Now()) || meta.TTL != DefaultTTL || meta.Expired {
			t.Errorf("meta = %+v, want seq %d issued now with the default TTL", meta, wantSeq)
		}
		if f.MemFreeBytes != wantFree {
			t.Errorf("MemFreeBytes = %d, want %d", f.MemFreeBytes, wantFree)
		}
		if diff := cmp.Diff(map[string]string{"rack": "a"}, f.Labels); diff != "" {
			t.Errorf("labels (-want +got):\n%s", diff)
		}
	}

	verify(1, 24254004*1024)
	m.files[MeminfoPath] = "MemTotal: 24684092 kB\nMemAvailable: 1000 kB\n"
	clock.Set(t0.Add(DefaultMaxProbeAge - time.Nanosecond))
	verify(2, 24254004*1024) // cached, fresh seq
	if got := probes.Load(); got != 1 {
		t.Fatalf("%d probes within the max age, want 1", got)
	}
	clock.Set(t0.Add(DefaultMaxProbeAge))
	verify(3, 1000*1024) // probed again
	if got := probes.Load(); got != 2 {
		t.Fatalf("%d probes, want 2", got)
	}
	clock.Set(t0) // the clock went backwards: probe again
	verify(4, 1000*1024)
	if got := probes.Load(); got != 3 {
		t.Fatalf("%d probes after the clock went backwards, want 3", got)
	}
}

// TestSourceSetLabels: new labels (a config reload) are in the next signed
// facts, with a higher seq and without a new probe; invalid ones are
// refused and the old ones stay.
func TestSourceSetLabels(t *testing.T) {
	deps, probes := countingDeps(linuxMachine())
	clock := &fakeClock{now: t0}
	src := newTestSource(t, deps, clock)
	ctx := context.Background()
	signed := func() (Facts, uint64) {
		t.Helper()
		s, err := src.Signed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f, meta, err := Verify(s, pubOf(testKey(1)), clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return f, meta.Seq
	}
	f, seq1 := signed()
	if diff := cmp.Diff(map[string]string{"rack": "a"}, f.Labels); diff != "" {
		t.Fatalf("labels before (-want +got):\n%s", diff)
	}
	if err := src.SetLabels(map[string]string{"rack": "b", "zone": "z1"}); err != nil {
		t.Fatal(err)
	}
	f, seq2 := signed()
	if diff := cmp.Diff(map[string]string{"rack": "b", "zone": "z1"}, f.Labels); diff != "" {
		t.Errorf("labels after SetLabels (-want +got):\n%s", diff)
	}
	if seq2 <= seq1 {
		t.Errorf("seq %d after SetLabels, want more than %d", seq2, seq1)
	}
	if got := probes.Load(); got != 1 {
		t.Errorf("%d probes, want 1 (labels need no probe)", got)
	}
	if err := src.SetLabels(map[string]string{"tier": "pinned"}); err == nil {
		t.Error("SetLabels accepted a tier label")
	}
	if f, _ := signed(); f.Labels["rack"] != "b" {
		t.Errorf("labels after a refused SetLabels = %v, want the old ones", f.Labels)
	}
	if err := src.SetLabels(nil); err != nil {
		t.Fatal(err)
	}
	if f, _ := signed(); f.Labels != nil {
		t.Errorf("labels after SetLabels(nil) = %v, want none", f.Labels)
	}
	// A reprobe keeps the labels last set.
	if err := src.SetLabels(map[string]string{"rack": "c"}); err != nil {
		t.Fatal(err)
	}
	clock.Set(t0.Add(DefaultMaxProbeAge))
	if f, _ := signed(); f.Labels["rack"] != "c" || probes.Load() != 2 {
		t.Errorf("after a reprobe: labels %v, %d probes; want rack c, 2 probes", f.Labels, probes.Load())
	}
}

// TestSourceClass: a Source with a class signs facts that claim the
// record node.class.<class> (claimed, available, no attributes), once;
// SetClass (a reload) changes or removes it without a probe, refuses a
// class that is not one capability word, and a reprobe keeps the class
// last set. Facts of a Source without a class have no node.* record and
// verify as before.
func TestSourceClass(t *testing.T) {
	deps, probes := countingDeps(linuxMachine())
	clock := &fakeClock{now: t0}
	seq, err := OpenSeqStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(deps, testKey(1), map[string]string{"rack": "a"}, seq, SourceOptions{Now: clock.Now, Class: "dev-mac"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	classes := func() []Capability {
		t.Helper()
		s, err := src.Signed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := Verify(s, pubOf(testKey(1)), clock.Now())
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if f.Labels["rack"] != "a" {
			t.Errorf("labels %v, want rack a", f.Labels)
		}
		var out []Capability
		for _, c := range f.Capabilities {
			if grammar.CapabilityFamily(c.ID) == "node" {
				out = append(out, c)
			}
		}
		return out
	}
	want := func(class string) []Capability {
		return []Capability{{ID: "node.class." + class, Provenance: grammar.ProvenanceClaimed, State: grammar.StateAvailable}}
	}
	if diff := cmp.Diff(want("dev-mac"), classes()); diff != "" {
		t.Fatalf("class records (-want +got):\n%s", diff)
	}
	if err := src.SetClass("edge"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want("edge"), classes()); diff != "" {
		t.Errorf("after SetClass (-want +got):\n%s", diff)
	}
	if got := probes.Load(); got != 1 {
		t.Errorf("%d probes, want 1 (a class needs no probe)", got)
	}
	for _, bad := range []string{"dev.mac", "Edge", "-x", strings.Repeat("a", grammar.MaxNameLen+1)} {
		if err := src.SetClass(bad); err == nil {
			t.Errorf("SetClass(%q) accepted", bad)
		}
	}
	if diff := cmp.Diff(want("edge"), classes()); diff != "" {
		t.Errorf("after refused SetClass (-want +got):\n%s", diff)
	}
	clock.Set(t0.Add(DefaultMaxProbeAge))
	if diff := cmp.Diff(want("edge"), classes()); diff != "" || probes.Load() != 2 {
		t.Errorf("after a reprobe (%d probes) (-want +got):\n%s", probes.Load(), diff)
	}
	if err := src.SetClass(""); err != nil {
		t.Fatal(err)
	}
	if got := classes(); len(got) != 0 {
		t.Errorf("after SetClass(\"\"): %+v, want no class record", got)
	}

	// A Source without a class (as every node before node.class).
	plain := newTestSource(t, deps, clock)
	s, err := plain.Signed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := Verify(s, pubOf(testKey(1)), clock.Now())
	if err != nil {
		t.Fatalf("Verify of facts without a class: %v", err)
	}
	for _, c := range f.Capabilities {
		if grammar.CapabilityFamily(c.ID) == "node" {
			t.Errorf("facts without a class carry %+v", c)
		}
	}
}

func TestSourceConcurrentCallersProbeOnce(t *testing.T) {
	deps, probes := countingDeps(linuxMachine())
	src := newTestSource(t, deps, &fakeClock{now: t0})
	const callers = 8
	seqs := make(chan uint64, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := src.Signed(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			_, meta, err := Verify(s, nil, t0)
			if err != nil {
				t.Error(err)
				return
			}
			seqs <- meta.Seq
		}()
	}
	wg.Wait()
	close(seqs)
	seen := map[uint64]bool{}
	for s := range seqs {
		if seen[s] {
			t.Errorf("seq %d signed twice", s)
		}
		seen[s] = true
	}
	if got := probes.Load(); got != 1 {
		t.Errorf("%d probes for concurrent callers, want 1", got)
	}
}

func TestSourceWaiterGivesUpWithItsContext(t *testing.T) {
	m := linuxMachine()
	m.onPath["nvidia-smi"] = true
	deps := m.deps()
	entered, release := make(chan struct{}), make(chan struct{})
	deps.Run = func(ctx context.Context, path string, args []string, stderr bool) ([]byte, error) {
		close(entered)
		<-release
		return []byte(realNvidiaSMI), nil
	}
	src := newTestSource(t, deps, &fakeClock{now: t0})

	first := make(chan error, 1)
	go func() {
		_, err := src.Signed(context.Background())
		first <- err
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := src.Signed(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting caller error = %v, want context.Canceled", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("probing caller: %v", err)
	}
}

func TestSourceFactsIsACopy(t *testing.T) {
	src := newTestSource(t, linuxMachine().deps(), &fakeClock{now: t0})
	f, err := src.Facts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.NodeID == "" {
		t.Error("Facts has no node id")
	}
	f.Labels["rack"] = "changed"
	f.Runtimes[0] = "changed"
	again, err := src.Facts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if again.Labels["rack"] != "a" || again.Runtimes[0] != grammar.RuntimeProcess {
		t.Errorf("a caller's change leaked into the cache: %+v", again)
	}
}

func TestNewSourceRefuses(t *testing.T) {
	seq, err := OpenSeqStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	good := linuxMachine().deps()
	tests := []struct {
		name   string
		deps   ProbeDeps
		key    []byte
		labels map[string]string
		seq    *SeqStore
		opts   SourceOptions
	}{
		{name: "short key", deps: good, key: testKey(1)[:5], seq: seq},
		{name: "tier label", deps: good, key: testKey(1), labels: map[string]string{"tier": "gold"}, seq: seq},
		{name: "nil seq", deps: good, key: testKey(1)},
		{name: "ttl too short", deps: good, key: testKey(1), seq: seq, opts: SourceOptions{TTL: time.Second}},
		{name: "negative probe age", deps: good, key: testKey(1), seq: seq, opts: SourceOptions{MaxProbeAge: -time.Second}},
		{name: "incomplete deps", deps: ProbeDeps{GOOS: "linux"}, key: testKey(1), seq: seq},
		{name: "dotted class", deps: good, key: testKey(1), seq: seq, opts: SourceOptions{Class: "dev.mac"}},
		{name: "upper-case class", deps: good, key: testKey(1), seq: seq, opts: SourceOptions{Class: "Dev-Mac"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewSource(tt.deps, tt.key, tt.labels, tt.seq, tt.opts); err == nil {
				t.Fatal("NewSource accepted it")
			}
		})
	}
}
