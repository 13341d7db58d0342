package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/operator"
)

// TestReloadChangesControllerTick: a SIGHUP reload that lowers
// controller.tick takes effect in the running node: the controller's loop
// ticks at the new period (it describes its own host at every tick),
// where before the reload it would not have ticked for an hour.
func TestReloadChangesControllerTick(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	anchor := hex.EncodeToString(pub)
	cfg := func(tick, deadAfter string) string {
		return "node:\n  data_dir: %s\nadmin: {listen: \"127.0.0.1:0\"}\n" +
			"host:\n  enabled: true\n  trust_anchors: [" + anchor + "]\n" +
			controllerSection(anchor, tick, deadAfter, "2s")
	}
	a := startNode(t, cfg("1h", "3h"), nil)
	self := a.n.id.ID()
	lastContact := func() time.Time {
		for _, nd := range a.n.ctrl.Nodes() {
			if nd.ID == self {
				return nd.LastContact
			}
		}
		t.Fatalf("the controller has no self target: %+v", a.n.ctrl.Nodes())
		return time.Time{}
	}
	started := lastContact()

	a.rewrite(cfg("100ms", "3h"))
	a.n.reloader.Reload()
	if a.reloadGauge() != 1 {
		t.Fatalf("reload refused: %s", a.n.status().(*operator.StatusDoc).Config.LastReloadError)
	}
	if got := a.n.config().Controller.Tick.D; got != 100*time.Millisecond {
		t.Fatalf("controller.tick in force = %v", got)
	}
	// Two describes of its own host after the reload: the loop ticks at
	// the new period (the old one would first tick in an hour).
	deadline := time.After(waitTimeout)
	first := time.Time{}
	for {
		if lc := lastContact(); lc.After(started) {
			if first.IsZero() {
				first = lc
			} else if lc.After(first) {
				break
			}
		}
		select {
		case <-deadline:
			t.Fatalf("the controller did not tick at the reloaded period: self last heard %v (start %v)", lastContact(), started)
		case <-time.After(20 * time.Millisecond): // polling a condition with a deadline
		}
	}
	if s := a.n.status().(*operator.StatusDoc).Config.LastReloadError; strings.TrimSpace(s) != "" {
		t.Errorf("last reload error %q", s)
	}
}

// TestReloadStepsCoverComponents: every component of the node that offers
// the reload contract (a Prepare method) has its step in the one list, by
// its field's name, so a component added without one fails here.
func TestReloadStepsCoverComponents(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	anchor := hex.EncodeToString(pub)
	tn := buildNode(t, filepath.Join(t.TempDir(), "data"), reloadBase+
		"host:\n  enabled: true\n  trust_anchors: ["+anchor+"]\n"+controllerSection(anchor, "1s", "3s", "1s"), nil)
	var names []string
	for _, s := range tn.n.reloadSteps(tn.n.config()) {
		names = append(names, s.Name)
	}
	v := reflect.ValueOf(tn.n).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		step := f.Name
		if step == "ctrl" {
			step = "controller" // its step is named for its config section
		}
		if _, ok := f.Type.MethodByName("Prepare"); ok && !slices.Contains(names, step) {
			t.Errorf("node.%s (%s) offers Prepare but has no reload step; steps: %q", f.Name, f.Type, names)
		}
	}
	if !slices.Contains(names, "controller") || names[len(names)-1] != "proxy" {
		t.Errorf("steps %q: want the controller's, and the proxy's last", names)
	}
}
