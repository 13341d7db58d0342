package host

import (
	"crypto/ed25519"
	"encoding/hex"
	"testing"

	"github.com/nodeld/nodeld/internal/config"
)

// TestFromConfigSelfController: a node that runs the controller is a
// controller of its own host (once, even when host.controllers lists
// it); without the controller, or in config check (no self key), only
// host.controllers are; a reader that is not a key is a peer's name.
func TestFromConfigSelfController(t *testing.T) {
	self, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Host.Controllers = []string{hex.EncodeToString(other)}
	cfg.Host.Readers = []string{"gpu", hex.EncodeToString(other)}
	count := func(enabled bool, self ed25519.PublicKey) int {
		t.Helper()
		cfg.Controller.Enabled = enabled
		hc, err := FromConfig(cfg, self)
		if err != nil {
			t.Fatal(err)
		}
		if len(hc.ReaderPeers) != 1 || hc.ReaderPeers[0] != "gpu" || len(hc.ReaderKeys) != 1 {
			t.Fatalf("readers: peers %v, keys %d", hc.ReaderPeers, len(hc.ReaderKeys))
		}
		return len(hc.Controllers)
	}
	if n := count(true, self); n != 2 {
		t.Errorf("controller enabled: %d controllers, want host.controllers and self", n)
	}
	if n := count(false, self); n != 1 {
		t.Errorf("controller disabled: %d controllers, want host.controllers only", n)
	}
	if n := count(true, nil); n != 1 {
		t.Errorf("config check (no self): %d controllers, want 1", n)
	}
	cfg.Host.Controllers = append(cfg.Host.Controllers, hex.EncodeToString(self))
	if n := count(true, self); n != 2 {
		t.Errorf("self listed and enabled: %d controllers, want it once", n)
	}
	cfg.Host.Controllers = []string{"not-a-key"}
	if _, err := FromConfig(cfg, self); err == nil {
		t.Error("a bad host.controllers key was accepted")
	}
}
