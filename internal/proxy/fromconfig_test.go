package proxy

import (
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/config"
)

// Every inference limit of the config reaches the proxy: a key that is
// decoded and validated but not wired would be a setting that does
// nothing.
func TestProxyConfigCarriesLimits(t *testing.T) {
	cfg := config.Default()
	cfg.Inference.Roles = []config.Role{{Name: "chat", Listen: "127.0.0.1:0", ModelPassthrough: true}}
	l := &cfg.Inference.Limits
	l.BodyTimeout = config.Duration{D: 7 * time.Second}
	l.StallTimeout = config.Duration{D: 8 * time.Second}
	l.RequestTimeout = config.Duration{D: 9 * time.Second}
	l.MaxConnections = 77
	pc := FromConfig(cfg)
	if pc.MaxConnections != 77 {
		t.Errorf("proxy max connections = %d, want 77", pc.MaxConnections)
	}
	if pc.BodyTimeout != 7*time.Second || pc.StallTimeout != 8*time.Second || pc.RequestTimeout != 9*time.Second {
		t.Errorf("proxy timeouts = body %v stall %v request %v, want 7s 8s 9s", pc.BodyTimeout, pc.StallTimeout, pc.RequestTimeout)
	}
	if len(pc.Roles) != 1 || !pc.Roles[0].ModelPassthrough {
		t.Errorf("roles = %+v, want chat with model_passthrough", pc.Roles)
	}
}
