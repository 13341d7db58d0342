package plane

import (
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/pkg"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testKey(t testing.TB, seed byte) (ed25519.PrivateKey, string) {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	s[0] = seed
	k := ed25519.NewKeyFromSeed(s)
	return k, identity.NodeID(k.Public().(ed25519.PublicKey))
}

func sampleFacts() facts.Facts {
	return facts.Facts{
		OS: "linux", Arch: "amd64", CPUs: 8, MemTotalBytes: 32 << 30, MemFreeBytes: 16 << 30,
		Runtimes: []string{"process"},
		GPUs:     []facts.GPU{{Index: 0, Name: "gpu", VRAMTotalBytes: 24 << 30, VRAMFreeBytes: 20 << 30}},
		Labels:   map[string]string{"rack": "a"},
	}
}

func signFacts(t testing.TB, k ed25519.PrivateKey, f facts.Facts, seq uint64, now time.Time) facts.Signed {
	t.Helper()
	s, err := facts.Sign(k, f, seq, now, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIngestFactsRules(t *testing.T) {
	k, id := testKey(t, 1)
	other, _ := testKey(t, 2)
	newNode := func() *nodeState {
		return &nodeState{target: Target{ID: id, Key: k.Public().(ed25519.PublicKey), Tier: engine.TrustPaired}}
	}
	f := sampleFacts()

	n := newNode()
	if err := n.ingestFacts(signFacts(t, k, f, 5, t0), t0); err != nil {
		t.Fatalf("first facts: %v", err)
	}
	// Same seq, same payload: unchanged.
	same := signFacts(t, k, f, 5, t0)
	if err := n.ingestFacts(same, t0); err != nil {
		t.Errorf("same facts again: %v", err)
	}
	// Same seq, other payload: stale.
	g := f
	g.MemFreeBytes = 1
	if err := n.ingestFacts(signFacts(t, k, g, 5, t0), t0); !errors.Is(err, ErrStaleFacts) {
		t.Errorf("same seq, other payload: %v, want ErrStaleFacts", err)
	}
	// Lower seq: stale.
	if err := n.ingestFacts(signFacts(t, k, g, 4, t0), t0); !errors.Is(err, ErrStaleFacts) {
		t.Errorf("lower seq: %v, want ErrStaleFacts", err)
	}
	if n.facts.facts.MemFreeBytes != f.MemFreeBytes {
		t.Errorf("stale facts replaced the held ones")
	}
	// Higher seq: replaces.
	if err := n.ingestFacts(signFacts(t, k, g, 6, t0), t0); err != nil || n.facts.facts.MemFreeBytes != 1 {
		t.Errorf("higher seq: err %v, mem %d", err, n.facts.facts.MemFreeBytes)
	}
	// Another key: refused.
	if err := n.ingestFacts(signFacts(t, other, f, 9, t0), t0); err == nil {
		t.Errorf("facts of another key accepted")
	}
	// Expired held facts never block a restarted seq.
	later := t0.Add(10 * time.Minute)
	if err := n.ingestFacts(signFacts(t, k, f, 1, later), later); err != nil || n.facts.meta.Seq != 1 {
		t.Errorf("restarted seq after expiry: err %v, seq %d", err, n.facts.meta.Seq)
	}
}

func TestLiveness(t *testing.T) {
	n := &nodeState{lastContact: t0}
	tests := []struct {
		name  string
		alive bool
		at    time.Duration
		want  engine.Liveness
	}{
		{"answered this tick", true, time.Hour, engine.Alive},
		{"silent briefly", false, 10 * time.Second, engine.Suspect},
		{"silent dead_after", false, 30 * time.Second, engine.Dead},
	}
	for _, tt := range tests {
		n.alive = tt.alive
		if got := n.liveness(t0.Add(tt.at), 30*time.Second); got != tt.want {
			t.Errorf("%s: liveness = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestEngineNodeTierFromOperator(t *testing.T) {
	k, id := testKey(t, 1)
	n := &nodeState{target: Target{ID: id, Key: k.Public().(ed25519.PublicKey), Tier: engine.TrustPinned}, alive: true, lastContact: t0}
	f := sampleFacts()
	f.Labels = map[string]string{"rack": "a"}
	if err := n.ingestFacts(signFacts(t, k, f, 1, t0), t0); err != nil {
		t.Fatal(err)
	}
	var ps profiles
	ps.begin(map[string]*nodeState{id: n})
	en := engineNode(n, t0, 30*time.Second, ps.of(n), nil, nil, engine.VerdictAllow, "")
	if en.Trust != engine.TrustPinned || en.Liveness != engine.Alive || en.FactsExpired || en.Profile == nil {
		t.Errorf("node = trust %s liveness %s expired %v profile %v", en.Trust, en.Liveness, en.FactsExpired, en.Profile)
	}
	wantMem := engine.Memory{HostFree: 16 << 30, VRAMFree: []uint64{20 << 30}}
	if d := cmp.Diff(wantMem, memory(n.facts.facts)); d != "" {
		t.Errorf("memory (-want +got):\n%s", d)
	}
	var ids []string
	for _, c := range capabilities(n.facts.facts) {
		ids = append(ids, c.ID)
	}
	want := []string{"cpu.arch.amd64", "os.linux", "runtime.process", "accel.gpu.0", "label.rack"}
	if d := cmp.Diff(want, ids); d != "" {
		t.Errorf("capabilities (-want +got):\n%s", d)
	}
	if en2 := engineNode(n, t0.Add(time.Hour), 30*time.Second, ps.of(n), nil, nil, engine.VerdictAllow, ""); !en2.FactsExpired {
		t.Errorf("facts past their TTL not marked expired")
	}
}

func TestRequestMatchesFacts(t *testing.T) {
	k, id := testKey(t, 1)
	n := &nodeState{target: Target{ID: id, Key: k.Public().(ed25519.PublicKey), Tier: engine.TrustPaired}, alive: true, lastContact: t0}
	if err := n.ingestFacts(signFacts(t, k, sampleFacts(), 1, t0), t0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		req   pkg.Requires
		res   pkg.Resources
		place bool
	}{
		{"any", pkg.Requires{}, pkg.Resources{}, true},
		{"arch os gpu runtime", pkg.Requires{Arch: []string{"arm64", "amd64"}, OS: []string{"linux"}, GPU: true, Runtimes: []string{"process"}}, pkg.Resources{MemBytes: 1 << 30, VRAMBytes: 8 << 30}, true},
		{"wrong arch", pkg.Requires{Arch: []string{"arm64"}}, pkg.Resources{}, false},
		{"missing runtime", pkg.Requires{Runtimes: []string{"ollama"}}, pkg.Resources{}, false},
		{"too much memory", pkg.Requires{}, pkg.Resources{MemBytes: 64 << 30}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &pkg.Verified{ManifestHash: "h", Manifest: &pkg.Manifest{ID: "echo", Version: "1", Kind: pkg.KindService, Runtime: pkg.Runtime{Type: "process"},
				Variants: []pkg.Variant{{Name: "cpu", Requires: tt.req, Resources: tt.res}}}}
			req := request(v, Order{}, engine.TrustPaired)
			var ps profiles
			ps.begin(map[string]*nodeState{id: n})
			en := engineNode(n, t0, 30*time.Second, ps.of(n), nil, nil, engine.VerdictAllow, "")
			dec, err := engine.Place(req, []engine.Node{en}, engine.Cluster{}, engine.DefaultWeights())
			if err != nil {
				t.Fatal(err)
			}
			if got := dec.Chosen != nil; got != tt.place {
				t.Errorf("placed = %v, want %v\n%s", got, tt.place, dec.Explain())
			}
		})
	}
}

func TestGate(t *testing.T) {
	k, id := testKey(t, 1)
	n := &nodeState{target: Target{ID: id, Key: k.Public().(ed25519.PublicKey), Tier: engine.TrustPaired}}
	if err := n.ingestFacts(signFacts(t, k, sampleFacts(), 1, t0), t0); err != nil {
		t.Fatal(err)
	}
	admit := map[string]KindRule{"service": {MinTier: engine.TrustPaired}}
	tests := []struct {
		name string
		p    Policy
		kind string
		want engine.Verdict
	}{
		{"default deny", Policy{}, "service", engine.VerdictDeny},
		{"kind not listed", Policy{Kinds: admit}, "inference", engine.VerdictDeny},
		{"admitted", Policy{Kinds: admit}, "service", engine.VerdictAllow},
		{"deny node", Policy{Kinds: admit, DenyNodes: []string{id}}, "service", engine.VerdictDeny},
		{"deny label value", Policy{Kinds: admit, DenyLabels: map[string]string{"rack": "a"}}, "service", engine.VerdictDeny},
		{"deny label any", Policy{Kinds: admit, DenyLabels: map[string]string{"rack": "*"}}, "service", engine.VerdictDeny},
		{"other label value", Policy{Kinds: admit, DenyLabels: map[string]string{"rack": "b"}}, "service", engine.VerdictAllow},
	}
	for _, tt := range tests {
		if got, why := gate(tt.p, tt.kind, n); got != tt.want {
			t.Errorf("%s: verdict %s (%s), want %s", tt.name, got, why, tt.want)
		}
	}
}
