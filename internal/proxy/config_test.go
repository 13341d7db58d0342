package proxy

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	role := func(name, listen string, conc int) RoleConfig {
		return RoleConfig{Name: name, Listen: listen, Concurrency: conc}
	}
	tests := []struct {
		name string
		give Config
		want []string // substrings of the error; none means valid
	}{
		{"zero config", Config{}, nil},
		{"two roles", Config{Roles: []RoleConfig{role("chat", "127.0.0.1:8090", 0), role("embed", "[::1]:0", 8)}}, nil},
		{"two port-0 roles on one ip", Config{Roles: []RoleConfig{role("a", "127.0.0.1:0", 0), role("b", "127.0.0.1:0", 0)}}, nil},
		{"everything wrong at once", Config{
			Roles: []RoleConfig{
				role("", "127.0.0.1:1", 0),
				role("bad/name", "0.0.0.0:80", 0),
				role("dup", "localhost:80", -1),
				role("dup", "127.0.0.1:1", MaxConcurrency+1),
			},
			MaxBodyBytes: -1, StallTimeout: -time.Second, BodyTimeout: -time.Millisecond,
		}, []string{
			`roles[0]: role name ""`,
			`roles[1]: role name "bad/name"`,
			`listen "0.0.0.0:80": host is not a loopback IP address`,
			`listen "localhost:80": host is not a loopback IP address`,
			"concurrency -1",
			`roles[3]: duplicate role "dup"`,
			`already used by role ""`,
			"concurrency 4097",
			"max body bytes -1",
			"stall timeout -1s is negative",
			"body timeout -1ms is negative",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted a bad config")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	got := Config{Roles: []RoleConfig{{Name: "a", Listen: "127.0.0.1:0"}}}.withDefaults()
	if got.Roles[0].Concurrency != DefaultConcurrency || got.MaxBodyBytes != 8<<20 || got.MeshMaxBodyBytes != 2<<20 ||
		got.StallTimeout != 120*time.Second || got.RequestTimeout != 900*time.Second || got.BodyTimeout != 30*time.Second {
		t.Errorf("defaults %+v", got)
	}
}
