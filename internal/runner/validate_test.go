package runner

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/grammar"
)

// parseLoopbackURL builds the endpoint from grammar.ParseLoopbackURL (whose
// cases live in internal/grammar): the base and the metrics label are the
// canonical IP form, and every refusal wraps ErrNotLoopback.
func TestParseLoopbackURL(t *testing.T) {
	tests := []struct {
		give     string
		wantBase string // "" = refused
	}{
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080"},
		{"http://[::1]:11434", "http://[::1]:11434"},
		{"http://LocalHost:8081", "http://127.0.0.1:8081"},
		{"http://[::ffff:127.0.0.1]:80", "http://127.0.0.1:80"},
		{"http://10.0.0.5:8090", ""},
		{"http://127.0.0.1:8090/v1", ""},
		{"http://127.0.0.1:" + strings.Repeat("1", 300), ""},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			ep, err := parseLoopbackURL(tt.give)
			if tt.wantBase == "" {
				if !errors.Is(err, ErrNotLoopback) || !errors.Is(err, grammar.ErrNotLoopback) || len(err.Error()) > 3*grammar.MaxLoopbackURLLen {
					t.Fatalf("parseLoopbackURL(%q) = %+v, %v; want a bounded ErrNotLoopback", tt.give, ep, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseLoopbackURL(%q): %v", tt.give, err)
			}
			if diff := cmp.Diff(tt.wantBase, ep.base); diff != "" {
				t.Errorf("base (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(strings.TrimPrefix(tt.wantBase, "http://"), ep.hostPort); diff != "" {
				t.Errorf("hostPort (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidModelName(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"qwen2.5:7b", true},
		{"mlx-community/Qwen2.5-7B-Instruct-4bit", true},
		{"/models/qwen-7b-q4_k_m.gguf", true},
		{strings.Repeat("m", maxModelNameBytes), true},
		{strings.Repeat("m", maxModelNameBytes+1), false},
		{"", false},
		{"a b", false},
		{`a"b`, false},
		{`a\b`, false},
		{"a\nb", false},
		{"a\x7fb", false},
		{"modèle", false},
	}
	for _, tt := range tests {
		if got := validModelName(tt.give); got != tt.want {
			t.Errorf("validModelName(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestNewAdopterValidates(t *testing.T) {
	ok := AdoptedInstance{Role: "chat", Kind: KindLlamaCpp, URL: "http://127.0.0.1:8080"}
	with := func(f func(*AdoptedInstance)) AdopterConfig {
		i := ok
		f(&i)
		return AdopterConfig{Instances: []AdoptedInstance{i}}
	}
	many := make([]AdoptedInstance, maxAdoptedInstances+1)
	for i := range many {
		many[i] = ok
	}
	tests := []struct {
		name    string
		give    AdopterConfig
		wantIs  error  // nil = accepted
		wantMsg string // substring of the error
	}{
		{name: "valid", give: with(func(*AdoptedInstance) {})},
		{name: "empty", give: AdopterConfig{}},
		{name: "non-loopback url", give: with(func(i *AdoptedInstance) { i.URL = "http://192.168.1.10:8080" }), wantIs: ErrNotLoopback, wantMsg: "instances[0]"},
		{name: "host name", give: with(func(i *AdoptedInstance) { i.URL = "http://gpu-1:8080" }), wantIs: ErrNotLoopback},
		{name: "unknown kind", give: with(func(i *AdoptedInstance) { i.Kind = "vllm" }), wantIs: ErrUnknownKind},
		{name: "bad role", give: with(func(i *AdoptedInstance) { i.Role = "chat/x" }), wantIs: ErrInvalidConfig, wantMsg: "bad role"},
		{name: "bad model", give: with(func(i *AdoptedInstance) { i.Model = "a b" }), wantIs: ErrInvalidConfig, wantMsg: "bad model"},
		{
			name:   "same role twice at one address",
			give:   AdopterConfig{Instances: []AdoptedInstance{ok, {Role: "chat", Kind: KindOllama, URL: "http://localhost:8080/"}}},
			wantIs: ErrInvalidConfig, wantMsg: "repeats instances[0]",
		},
		{name: "too many", give: AdopterConfig{Instances: many}, wantIs: ErrInvalidConfig, wantMsg: "at most"},
		{name: "interval too short", give: AdopterConfig{Interval: time.Millisecond}, wantIs: ErrInvalidConfig, wantMsg: "interval"},
		{name: "negative timeout", give: AdopterConfig{ProbeTimeout: -time.Second}, wantIs: ErrInvalidConfig, wantMsg: "timeout"},
		{name: "negative miss limit", give: AdopterConfig{MissLimit: -1}, wantIs: ErrInvalidConfig, wantMsg: "miss limit"},
		{name: "miss limit too high", give: AdopterConfig{MissLimit: maxMissLimit + 1}, wantIs: ErrInvalidConfig, wantMsg: "miss limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAdopter(tt.give, &fakeRegistrar{}, nil, nil)
			if tt.wantIs == nil {
				if err != nil {
					t.Fatalf("NewAdopter: %v", err)
				}
				return
			}
			if a != nil || !errors.Is(err, tt.wantIs) || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("NewAdopter = %v, %v; want errors.Is %v and ErrInvalidConfig", a, err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestNewAdopterReportsEveryProblem(t *testing.T) {
	cfg := AdopterConfig{Instances: []AdoptedInstance{
		{Role: "chat", Kind: KindLlamaCpp, URL: "http://10.0.0.1:8080"},
		{Role: "", Kind: "nope", URL: "http://127.0.0.1:1"},
	}}
	_, err := NewAdopter(cfg, &fakeRegistrar{}, nil, nil)
	for _, want := range []string{"instances[0]", "instances[1]", "bad role", "unknown runtime kind"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

func TestNewAdopterDefaults(t *testing.T) {
	a, err := NewAdopter(AdopterConfig{}, &fakeRegistrar{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([2]time.Duration{DefaultProbeInterval, DefaultProbeTimeout}, [2]time.Duration{a.cfg.Interval, a.cfg.ProbeTimeout}); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if _, err := NewAdopter(AdopterConfig{}, nil, nil, nil); err == nil {
		t.Error("NewAdopter accepted a nil registrar")
	}
}
