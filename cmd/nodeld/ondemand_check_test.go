package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/mesh"
)

// TestConfigCheckOnDemand: config check accepts an on-demand workload
// whose demand_from names this node (self, node.name, its own id) and a
// peer, and refuses, with its line and exit status 2, a demand_from name
// no node has (through the one node resolver) and an on-demand setting
// that would do nothing.
func TestConfigCheckOnDemand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	makeKey(t, dataDir)
	self := mesh.KnownNodesIn(dataDir).SelfID
	if self == "" {
		t.Fatal("own id not read")
	}
	peers := "mesh:\n  listen: 127.0.0.1:0\n  peers:\n    - name: gpu\n      addr: 127.0.0.1:7401\n"
	workloads := func(onDemand string) string {
		return "controller:\n  enabled: true\n  policy:\n    kinds: {inference: {}}\n  workloads:\n    - name: chat\n      package: echo-llm\n      on_demand:\n" + onDemand
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(nodeConfig(dataDir, peers+body)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", workloads("        enabled: true\n        demand_from: [gpu, self, e2e, "+self+"]\n"))
	if out, errOut, rc := runCLI(t, "config", "check", good); rc != 0 {
		t.Fatalf("config check of an on-demand workload = %d %q %q", rc, out, errOut)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"unknown", "        enabled: true\n        demand_from: [gpu-9]\n",
			`line 27: controller.workloads[0].on_demand.demand_from[0]: "gpu-9" names no known node`},
		{"idle", "        idle_after: 1m\n",
			`line 26: controller.workloads[0].on_demand.idle_after: is set but on_demand.enabled is not true`},
	} {
		_, errOut, rc := runCLI(t, "config", "check", write(tc.name+".yaml", workloads(tc.body)))
		if rc != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: config check = %d %q, want 2 and %q", tc.name, rc, errOut, tc.want)
		}
	}
}
