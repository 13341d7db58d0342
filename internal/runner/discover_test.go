package runner

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeld/nodeld/internal/runner/runnertest"
)

// discoverConfig turns discovery on for role chat over candidates.
func discoverConfig(cands ...DiscoverCandidate) AdopterConfig {
	return AdopterConfig{Discover: true, DiscoverRole: "chat", DiscoverCandidates: cands}
}

// statusOf is a's status without the probe times and errors.
func statusOf(a *Adopter) []InstanceStatus {
	var out []InstanceStatus
	for _, s := range a.Status() {
		s.LastProbe, s.LastError = time.Time{}, ""
		out = append(out, s)
	}
	return out
}

// TestAdopterDiscovers: with no instance configured, the first candidate
// in order that answers like its runtime is adopted for the role and shown
// as discovered; one that answers as another runtime, or names no model,
// is passed over. When it goes away it is dropped, and the next round
// discovers again.
func TestAdopterDiscovers(t *testing.T) {
	nothing := freeAddr(t)
	wrongKind := runnertest.NewServer(t, "openai", "m") // tried as Ollama
	noModel := runnertest.NewServer(t, "llama.cpp")     // /health answers, no model
	ollama := runnertest.NewServer(t, "ollama", "llama3:8b")
	vllm := runnertest.NewServer(t, "openai", "Qwen/Qwen2.5-7B")
	cfg := discoverConfig(
		DiscoverCandidate{Kind: KindOllama, URL: "http://" + nothing},
		DiscoverCandidate{Kind: KindOllama, URL: wrongKind.URL},
		DiscoverCandidate{Kind: KindLlamaCpp, URL: noModel.URL},
		DiscoverCandidate{Kind: KindOllama, URL: ollama.URL},
		DiscoverCandidate{Kind: KindOpenAI, URL: vllm.URL},
	)
	h := startAdopter(t, cfg, nil)
	h.wantRegs(t, map[string]reg{"chat": {ollama.URL, "llama3:8b", "openai", "ollama"}})
	want := []InstanceStatus{{Role: "chat", Kind: "ollama", URL: ollama.URL, Model: "llama3:8b", Health: HealthUp, Serving: true, Discovered: true}}
	if diff := cmp.Diff(want, statusOf(h.a)); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}

	// While it serves, the candidates are not probed again.
	hits := vllm.Hits("/v1/models")
	h.tickRound(t)
	if got := vllm.Hits("/v1/models"); got != hits {
		t.Errorf("a candidate was probed %d more times while one was adopted", got-hits)
	}

	// It goes away: dropped at once, and the next round finds the next one.
	ollama.Close()
	h.tickRound(t)
	h.wantRegs(t, nil)
	if st := h.a.Status(); len(st) != 0 {
		t.Errorf("status after the discovered server went = %+v, want none", st)
	}
	h.tickRound(t)
	h.wantRegs(t, map[string]reg{"chat": {vllm.URL, "Qwen/Qwen2.5-7B", "openai", "openai"}})
	if st := h.a.Status(); len(st) != 1 || !st[0].Discovered || st[0].Kind != "openai" {
		t.Errorf("status = %+v, want the vLLM server, discovered", st)
	}
}

// TestAdopterDiscoversLateServer: a server started after the Adopter (say
// Ollama started after nodeld) is found at the next round.
func TestAdopterDiscoversLateServer(t *testing.T) {
	addr := freeAddr(t)
	h := startAdopter(t, discoverConfig(DiscoverCandidate{Kind: KindOllama, URL: "http://" + addr}), nil)
	h.wantRegs(t, nil)
	if st := h.a.Status(); len(st) != 0 {
		t.Fatalf("status with nothing to discover = %+v", st)
	}
	h.tickRound(t)
	srv := runnertest.NewServerAt(t, addr, "ollama", "qwen2.5:7b")
	h.tickRound(t)
	h.wantRegs(t, map[string]reg{"chat": {srv.URL, "qwen2.5:7b", "openai", "ollama"}})
}

// TestAdopterDiscoveryOffWithInstances: a configured instance turns
// discovery off, even when it is down; a reload that configures one drops
// the discovered instance, and one that turns discovery off does too.
func TestAdopterDiscoveryOffWithInstances(t *testing.T) {
	cand := runnertest.NewServer(t, "openai", "found")
	configured := AdoptedInstance{Role: "chat", Kind: KindOpenAI, URL: "http://" + freeAddr(t)}
	cfg := discoverConfig(DiscoverCandidate{Kind: KindOpenAI, URL: cand.URL})
	cfg.Instances = []AdoptedInstance{configured}
	h := startAdopter(t, cfg, nil)
	h.tickRound(t)
	h.wantRegs(t, nil)
	if n := cand.Hits("/v1/models"); n != 0 {
		t.Errorf("candidate probed %d times with an instance configured", n)
	}

	// Discovery alone: found.
	if err := h.a.ApplyConfig(discoverConfig(DiscoverCandidate{Kind: KindOpenAI, URL: cand.URL})); err != nil {
		t.Fatal(err)
	}
	h.waitRound(t)
	h.wantRegs(t, map[string]reg{"chat": {cand.URL, "found", "openai", "openai"}})
	// The same reload again keeps it, without a new registration.
	h.reg.takeCalls()
	if err := h.a.ApplyConfig(discoverConfig(DiscoverCandidate{Kind: KindOpenAI, URL: cand.URL})); err != nil {
		t.Fatal(err)
	}
	h.waitRound(t)
	if calls := h.reg.takeCalls(); len(calls) != 0 {
		t.Errorf("an unchanged reload made calls %v", calls)
	}
	// Discovery off: dropped when ApplyConfig returns.
	if err := h.a.ApplyConfig(AdopterConfig{}); err != nil {
		t.Fatal(err)
	}
	h.wantRegs(t, nil)
	if st := h.a.Status(); len(st) != 0 {
		t.Errorf("status with discovery off = %+v", st)
	}
}

func TestDefaultDiscoverCandidates(t *testing.T) {
	want := []DiscoverCandidate{
		{KindOllama, "http://127.0.0.1:11434"},
		{KindLlamaCpp, "http://127.0.0.1:8080"},
		{KindOpenAI, "http://127.0.0.1:1234"},
		{KindOpenAI, "http://127.0.0.1:8000"},
	}
	if diff := cmp.Diff(want, DefaultDiscoverCandidates()); diff != "" {
		t.Errorf("candidates (-want +got):\n%s", diff)
	}
	DefaultDiscoverCandidates()[0].URL = "changed"
	if DefaultDiscoverCandidates()[0].URL == "changed" {
		t.Error("DefaultDiscoverCandidates returns shared state")
	}
	// The defaults are what a config without candidates gets; never bound
	// here (a test must not touch the real ports).
	if diff := cmp.Diff(want, AdopterConfig{}.withDefaults().DiscoverCandidates, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("defaulted candidates (-want +got):\n%s", diff)
	}
}

func TestValidateDiscovery(t *testing.T) {
	tests := []struct {
		name    string
		give    AdopterConfig
		wantErr error // nil = valid
	}{
		{"off ignores candidates", AdopterConfig{DiscoverCandidates: []DiscoverCandidate{{Kind: "x", URL: "y"}}}, nil},
		{"default candidates", AdopterConfig{Discover: true, DiscoverRole: "chat"}, nil},
		{"no role", AdopterConfig{Discover: true}, ErrInvalidConfig},
		{"non-loopback candidate", discoverConfig(DiscoverCandidate{Kind: KindOllama, URL: "http://10.0.0.2:11434"}), ErrNotLoopback},
		{"unknown kind", discoverConfig(DiscoverCandidate{Kind: "vllm", URL: "http://127.0.0.1:8000"}), ErrUnknownKind},
		{"too many", discoverConfig(make([]DiscoverCandidate, maxDiscoverCandidates+1)...), ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Validate = %v, want %v and ErrInvalidConfig", err, tt.wantErr)
			}
		})
	}
}

// TestValidateNamesInstanceFields: each problem of an instance is an
// *InstanceError naming the instance and the field, so a caller can point
// at the config line.
func TestValidateNamesInstanceFields(t *testing.T) {
	cfg := AdopterConfig{Instances: []AdoptedInstance{
		{Role: "chat", Kind: KindOpenAI, URL: "http://127.0.0.1:8080/v1"},
		{Role: "_x", Kind: "vllm", URL: "http://127.0.0.1:8081", Model: "a b"},
		{Role: "chat", Kind: KindOpenAI, URL: "http://localhost:8082"},
		{Role: "chat", Kind: KindOllama, URL: "http://127.0.0.1:8082/"},
	}}
	err := cfg.Validate()
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("Validate = %v, want a *ConfigError", err)
	}
	type where struct {
		Index int
		Field string
	}
	var got []where
	for _, p := range ce.Problems {
		var ie *InstanceError
		if !errors.As(p, &ie) {
			t.Fatalf("problem %v is not an *InstanceError", p)
		}
		got = append(got, where{ie.Index, ie.Field})
	}
	want := []where{{0, FieldURL}, {1, FieldRole}, {1, FieldKind}, {1, FieldModel}, {3, ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if !errors.Is(err, ErrNotLoopback) || !errors.Is(err, ErrUnknownKind) {
		t.Errorf("Validate = %v, want it to wrap ErrNotLoopback and ErrUnknownKind", err)
	}
}
