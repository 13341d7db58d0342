package ctl

import (
	"encoding/json"
	"testing"
)

// The id derivation is a wire contract between a controller, which
// predicts the id, and the host, which assigns it: these ids were made by
// the host before the derivation moved here, and must never change.
func TestInstanceIDGolden(t *testing.T) {
	tests := []struct {
		name string
		cfg  InstanceConfig
		want string
	}{
		{"no config", InstanceConfig{}, "echo-ae49b65a-n-1"},
		{"port", InstanceConfig{Port: 8080}, "echo-3f2f7009-n-1"},
		// An empty workload leaves the id of an operator's placement as it was.
		{"empty workload", InstanceConfig{Workload: ""}, "echo-ae49b65a-n-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := InstanceID("echo", "1.0", "default", testDecision, tt.cfg, "n-1"); got != tt.want {
				t.Errorf("InstanceID = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestInstanceIDDeterministic(t *testing.T) {
	a := InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{}, "n-1")
	if b := InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{}, "n-1"); a != b {
		t.Errorf("same input, ids %q and %q", a, b)
	}
	for _, other := range []string{
		InstanceID("echo", "1.1", "default", testDecision, InstanceConfig{}, "n-1"),
		InstanceID("echo", "1.0", "big", testDecision, InstanceConfig{}, "n-1"),
		InstanceID("echo", "1.0", "default", "bb"+testDecision[2:], InstanceConfig{}, "n-1"),
		InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{Port: 8080}, "n-1"),
		InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{}, "n-2"),
		InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{Workload: "chat"}, "n-1"),
	} {
		if other == a {
			t.Errorf("different input, same id %q", a)
		}
	}
}

// A config carried as JSON names the same instance as the value it
// decodes to, so a controller that sends InstanceConfig's JSON predicts
// the host's id.
func TestInstanceConfigJSON(t *testing.T) {
	c := InstanceConfig{Port: 9000, Workload: "chat"}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back InstanceConfig
	if err := json.Unmarshal(b, &back); err != nil || back != c {
		t.Fatalf("round trip %s: %+v %v", b, back, err)
	}
	if b, _ := json.Marshal(InstanceConfig{}); string(b) != "{}" {
		t.Errorf("zero config encodes as %s, want {}", b)
	}
}

func TestInstanceConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		port int
		ok   bool
	}{{0, true}, {1, true}, {65535, true}, {-1, false}, {65536, false}} {
		if err := (InstanceConfig{Port: tt.port}).Validate(); (err == nil) != tt.ok {
			t.Errorf("port %d: err = %v, want ok %v", tt.port, err, tt.ok)
		}
	}
	for w, ok := range map[string]bool{"": true, "chat": true, "chat-2.eu": true, "Chat": false, "a/b": false, "-x": false} {
		if err := (InstanceConfig{Workload: w}).Validate(); (err == nil) != ok {
			t.Errorf("workload %q: err = %v, want ok %v", w, err, ok)
		}
	}
}
