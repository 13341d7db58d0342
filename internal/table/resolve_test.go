package table

import (
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLocalBeatsRemote(t *testing.T) {
	e := newEnv("n-b")
	e.t.AllowRemoteNode("chat", "n-b", true)
	e.t.IngestAdvertisement("n-b", ad("chat", "n-b"))
	slot, err := e.t.RegisterLocal(OriginPlaced, "chat", "http://127.0.0.1:8080", "local-m", "openai", "x")
	if err != nil {
		t.Fatal(err)
	}
	calls := e.adm.calls
	got, _ := e.t.Resolve("chat")
	if diff := cmp.Diff(Target{Kind: TargetLocal, Base: "http://127.0.0.1:8080", Model: "local-m", Runtime: "x"}, got); diff != "" {
		t.Fatalf("Resolve (-want +got):\n%s", diff)
	}
	if e.adm.calls != calls {
		t.Fatal("a local resolution consulted admission")
	}
	slot.Release()
	got, _ = e.t.Resolve("chat")
	if diff := cmp.Diff(Target{Kind: TargetRemote, NodeID: "n-b"}, got); diff != "" {
		t.Fatalf("Resolve after release (-want +got):\n%s", diff)
	}
}

func TestRemoteChoice(t *testing.T) {
	type cand struct {
		node     string
		kv       []string
		admitted bool
		allowed  bool
		stale    bool
	}
	tests := []struct {
		name  string
		cands []cand
		want  string // "" = nothing resolves
	}{
		{"lowest load wins", []cand{
			{node: "n-a", kv: []string{MetaLoad, "0.75"}, admitted: true, allowed: true},
			{node: "n-b", kv: []string{MetaLoad, "0.25"}, admitted: true, allowed: true},
			{node: "n-c", kv: []string{MetaLoad, "0.5"}, admitted: true, allowed: true},
		}, "n-b"},
		{"tie by node id ascending", []cand{
			{node: "n-c", kv: []string{MetaLoad, "0.5"}, admitted: true, allowed: true},
			{node: "n-b", kv: []string{MetaLoad, "0.5"}, admitted: true, allowed: true},
			{node: "n-d", kv: []string{MetaLoad, "0.5"}, admitted: true, allowed: true},
		}, "n-b"},
		{"no load metadata counts as zero (original's first by id)", []cand{
			{node: "n-c", admitted: true, allowed: true},
			{node: "n-b", admitted: true, allowed: true},
		}, "n-b"},
		{"unparseable load ranks last", []cand{
			{node: "n-a", kv: []string{MetaLoad, "NaN"}, admitted: true, allowed: true},
			{node: "n-b", kv: []string{MetaLoad, "-1"}, admitted: true, allowed: true},
			{node: "n-c", kv: []string{MetaLoad, "9"}, admitted: true, allowed: true},
		}, "n-c"},
		{"healthy before unhealthy", []cand{
			{node: "n-a", kv: []string{MetaLoad, "0", MetaHealth, "loading"}, admitted: true, allowed: true},
			{node: "n-b", kv: []string{MetaLoad, "0.9", MetaHealth, HealthUp}, admitted: true, allowed: true},
		}, "n-b"},
		{"unhealthy still serves when alone", []cand{
			{node: "n-a", kv: []string{MetaHealth, "loading"}, admitted: true, allowed: true},
		}, "n-a"},
		{"best is not admitted: next", []cand{
			{node: "n-a", kv: []string{MetaLoad, "0"}, admitted: false, allowed: true},
			{node: "n-b", kv: []string{MetaLoad, "0.5"}, admitted: true, allowed: true},
		}, "n-b"},
		{"best is stale: next", []cand{
			{node: "n-a", kv: []string{MetaLoad, "0"}, admitted: true, allowed: true, stale: true},
			{node: "n-b", kv: []string{MetaLoad, "0.5"}, admitted: true, allowed: true},
		}, "n-b"},
		{"best is disallowed: next", []cand{
			{node: "n-a", kv: []string{MetaLoad, "0"}, admitted: true, allowed: false},
			{node: "n-b", kv: []string{MetaLoad, "0.5"}, admitted: true, allowed: true},
		}, "n-b"},
		{"none qualifies", []cand{
			{node: "n-a", admitted: false, allowed: true},
			{node: "n-b", admitted: true, allowed: true, stale: true},
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv()
			for _, c := range tt.cands {
				if c.stale {
					e.adm.set(c.node, true)
					e.t.AllowRemoteNode("chat", c.node, true)
					if !e.t.IngestAdvertisement(c.node, ad("chat", c.node, c.kv...)) {
						t.Fatalf("%s refused", c.node)
					}
				}
			}
			e.clock.advance(DefaultAdvertTTL + time.Second)
			for _, c := range tt.cands {
				if !c.stale {
					e.adm.set(c.node, true)
					e.t.AllowRemoteNode("chat", c.node, true)
					if !e.t.IngestAdvertisement(c.node, ad("chat", c.node, c.kv...)) {
						t.Fatalf("%s refused", c.node)
					}
				}
			}
			for _, c := range tt.cands {
				e.adm.set(c.node, c.admitted)
				e.t.AllowRemoteNode("chat", c.node, c.allowed)
			}
			// Deterministic: the same answer every time.
			first, ok := e.t.Resolve("chat")
			for range 20 {
				again, ok2 := e.t.Resolve("chat")
				if again != first || ok2 != ok {
					t.Fatalf("Resolve not deterministic: %+v then %+v", first, again)
				}
			}
			if tt.want == "" {
				if ok {
					t.Fatalf("Resolve = %+v, want nothing", first)
				}
				return
			}
			if !ok || first.Kind != TargetRemote || first.NodeID != tt.want {
				t.Fatalf("Resolve = %+v, %v; want remote %s", first, ok, tt.want)
			}
		})
	}
}

func TestRemoteTargetCarriesAdvertisedModel(t *testing.T) {
	e := newEnv("n-b")
	e.t.AllowRemoteNode("chat", "n-b", true)
	e.t.IngestAdvertisement("n-b", ad("chat", "n-b", MetaModel, "qwen", MetaRuntime, "ollama"))
	got, _ := e.t.Resolve("chat")
	if diff := cmp.Diff(Target{Kind: TargetRemote, NodeID: "n-b", Model: "qwen", Runtime: "ollama"}, got); diff != "" {
		t.Fatalf("Resolve (-want +got):\n%s", diff)
	}
}

func TestResolveDoesNotHoldTheLockWhileAskingAdmission(t *testing.T) {
	// An Admission that calls back into the table would deadlock if
	// Resolve held the lock (a writer waiting between two readers).
	e := newEnv()
	reentrant := admissionFunc(func(node string) bool {
		e.t.AllowMeshPeer("chat", node, true) // takes the write lock
		return true
	})
	e.t = New(self, Options{Admission: reentrant, Now: e.clock.now})
	e.t.AllowRemoteNode("chat", "n-b", true)
	e.t.IngestAdvertisement("n-b", ad("chat", "n-b"))
	if _, ok := e.t.Resolve("chat"); !ok {
		t.Fatal("no resolution")
	}
	_ = e.t.Snapshot()
}

type admissionFunc func(string) bool

func (f admissionFunc) IsAdmitted(n string) bool { return f(n) }

// TestResolveOnTheDefaultClockExpires: on the default clock, resolve's
// reading (compareNow) ages a route as time.Now does: it resolves once
// received and stops no sooner than its TTL after.
func TestResolveOnTheDefaultClockExpires(t *testing.T) {
	const ttl = 20 * time.Millisecond
	tbl := New(self, Options{Admission: admissionFunc(func(string) bool { return true }), AdvertTTL: ttl})
	tbl.AllowRemoteNode("chat", "n-b", true)
	start := time.Now()
	if !tbl.IngestAdvertisement("n-b", ad("chat", "n-b")) {
		t.Fatal("advertisement refused")
	}
	if _, ok := tbl.Resolve("chat"); !ok {
		t.Fatal("a route just received does not resolve")
	}
	deadline := start.Add(10 * time.Second)
	for {
		_, ok := tbl.Resolve("chat")
		if since := time.Since(start); !ok {
			if since < ttl {
				t.Fatalf("the route stopped resolving %v after it was received, within its TTL", since)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the route still resolves long after its TTL")
		}
		runtime.Gosched()
	}
}
