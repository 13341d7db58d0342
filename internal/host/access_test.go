package host

import (
	"crypto/ed25519"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
)

// apply reloads the host's config with mod applied to the current one.
func (c *cluster) apply(t testing.TB, mod func(*Config)) {
	t.Helper()
	cfg := c.h.config()
	mod(&cfg)
	if err := c.h.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

// TestReadAccess checks who may call what, through reloads: describe is
// open to every admitted peer, status and logs to controllers and readers
// only, the mutating verbs to controllers only, on enabled and disabled
// hosts alike.
func TestReadAccess(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	res, _, err := c.place(t, buildCrash(t, c.publisher), false)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	caller := c.caller.Ident.PublicKey()
	other := pubOf(newKey(t))
	// ok is a served call; a mutating verb that passes authorization is
	// refused unknown_instance (it names no instance).
	const ok = ctl.Code("")
	type codes struct{ Describe, Status, Logs, Start, Stop, Unload ctl.Code }
	served := codes{ok, ok, ok, ctl.CodeUnknownInstance, ctl.CodeUnknownInstance, ctl.CodeUnknownInstance}
	reader := codes{ok, ok, ok, ctl.CodeUnauthorized, ctl.CodeUnauthorized, ctl.CodeUnauthorized}
	peer := codes{ok, ctl.CodeUnauthorized, ctl.CodeUnauthorized, ctl.CodeUnauthorized, ctl.CodeUnauthorized, ctl.CodeUnauthorized}
	tests := []struct {
		name string
		cfg  func(*Config)
		want codes
	}{
		{name: "controller", want: served, cfg: func(cfg *Config) {}},
		{name: "admitted peer", want: peer, cfg: func(cfg *Config) { cfg.Controllers = []ed25519.PublicKey{other} }},
		{name: "reader by key", want: reader, cfg: func(cfg *Config) {
			cfg.Controllers, cfg.ReaderKeys = []ed25519.PublicKey{other}, []ed25519.PublicKey{other, caller}
		}},
		{name: "reader by peer name", want: reader, cfg: func(cfg *Config) {
			cfg.Controllers, cfg.ReaderPeers = []ed25519.PublicKey{other}, []string{"caller"}
		}},
		{name: "readers name others", want: peer, cfg: func(cfg *Config) {
			cfg.Controllers, cfg.ReaderKeys, cfg.ReaderPeers = []ed25519.PublicKey{other}, []ed25519.PublicKey{other}, []string{"nobody"}
		}},
		{name: "disabled, admitted peer", want: peer, cfg: func(cfg *Config) {
			cfg.Enabled, cfg.Controllers = false, []ed25519.PublicKey{other}
		}},
		{name: "disabled, reader", want: reader, cfg: func(cfg *Config) {
			cfg.Enabled, cfg.Controllers, cfg.ReaderKeys = false, []ed25519.PublicKey{other}, []ed25519.PublicKey{caller}
		}},
		// A disabled host refuses its controllers' mutations too.
		{name: "disabled, controller", want: reader, cfg: func(cfg *Config) { cfg.Enabled = false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.apply(t, func(cfg *Config) {
				cfg.Enabled, cfg.Controllers, cfg.ReaderKeys, cfg.ReaderPeers = true, []ed25519.PublicKey{caller}, nil, nil
				tt.cfg(cfg)
			})
			code := func(method ctl.Method, body any, decision string) ctl.Code {
				_, err := c.call(t, method, body, decision)
				if err != nil && refusalCode(err) == "" {
					t.Fatalf("%s: %v", method, err)
				}
				return refusalCode(err)
			}
			none := ctl.InstanceParams{InstanceID: "no-such-instance"}
			got := codes{
				Describe: code(ctl.MethodDescribe, nil, ""),
				Status:   code(ctl.MethodStatus, ctl.InstanceParams{}, ""),
				Logs:     code(ctl.MethodLogs, ctl.InstanceParams{InstanceID: res.InstanceID}, ""),
				Start:    code(ctl.MethodStart, none, newDecision()),
				Stop:     code(ctl.MethodStop, none, newDecision()),
				Unload:   code(ctl.MethodUnload, none, newDecision()),
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("refusal codes (-want +got):\n%s", diff)
			}
		})
	}
	// A refused read is chained like every refusal.
	meshtest.WaitFor(t, "status refusal chained", func() bool {
		for _, r := range c.audit.ofKind(KindCtlRefused) {
			if r["method"] == string(ctl.MethodStatus) && r["code"] == string(ctl.CodeUnauthorized) && r["peer"] == c.caller.Ident.ID() {
				return true
			}
		}
		return false
	})
}
