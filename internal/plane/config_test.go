package plane

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
)

func TestDefaultValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		give func(*Config)
		want []string
	}{
		{name: "ok", give: func(c *Config) {
			c.Policy.Kinds = map[string]KindRule{"inference": {MinTier: engine.TrustPaired}}
		}},
		{name: "zero durations", give: func(c *Config) { c.Tick, c.DeadAfter = 0, 0 },
			want: []string{"tick: must be positive", "dead_after: must be positive"}},
		{name: "dead before tick", give: func(c *Config) { c.DeadAfter = time.Second },
			want: []string{"shorter than one tick"}},
		{name: "negative reschedules", give: func(c *Config) { c.MaxReschedules = -1 },
			want: []string{"max_reschedules"}},
		{name: "bad policy", give: func(c *Config) {
			c.Policy.Kinds = map[string]KindRule{"Bad Kind": {MinTier: engine.TrustPaired}, "service": {}}
			c.Policy.DenyNodes = []string{""}
			c.Policy.DenyLabels = map[string]string{"rack": "a b\x00"}
		}, want: []string{"not a valid kind name", "policy.kinds.service.min_tier", "deny_nodes[0]", "deny_labels.rack"}},
		{name: "workloads ok", give: func(c *Config) {
			c.Workloads = []Workload{
				{Name: "chat", Package: "echo-llm", Replicas: 3, Prefer: []string{"n-1"}, Avoid: []string{"n-2"}},
				{Name: "pinned", Package: "echo-llm", Version: "1.2.0-rc.1", Variant: "cpu", Node: "n-1"},
			}
		}},
		{name: "bad workloads", give: func(c *Config) {
			c.Workloads = []Workload{
				{Name: "Chat", Package: "../x", Version: "/1", Variant: "A B", Replicas: -1},
				{Name: "dup", Package: "p"}, {Name: "dup", Package: "p"},
				{Name: "pin", Package: "p", Node: "n-1", Replicas: 2},
				{Name: "many", Package: "p", Replicas: MaxReplicas + 1, Prefer: []string{""}},
			}
		}, want: []string{"workloads[0].name", "workloads[0].package", "workloads[0].version", "workloads[0].variant",
			"workloads[0].replicas", "dup is declared twice", "replicas go on distinct nodes", "workloads[4].replicas", "workloads[4].prefer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.give(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestBackoffDoublesToFiveMinutes(t *testing.T) {
	want := []time.Duration{10, 20, 40, 80, 160, 300, 300, 300}
	for i, w := range want {
		if got := backoff(10*time.Second, i+1); got != w*time.Second {
			t.Errorf("backoff(10s, %d) = %s, want %s", i+1, got, w*time.Second)
		}
	}
}
