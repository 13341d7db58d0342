package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/operator"
)

// TestConfigCheckRefusesUnknownNodeRefs: config check refuses a
// workload's node, prefer or avoid that names no node, with its line, and
// accepts self, node.name, a peer's name and this node's own id (read
// from its key in the data dir); a reload refuses the same, and keeps the
// config in force.
func TestConfigCheckRefusesUnknownNodeRefs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	makeKey(t, dataDir)
	self := mesh.KnownNodesIn(dataDir).SelfID
	if self == "" {
		t.Fatal("own id not read")
	}
	peers := "mesh:\n  listen: 127.0.0.1:0\n  peers:\n    - name: gpu\n      addr: 127.0.0.1:7401\n"
	workloads := func(refs string) string {
		return "controller:\n  enabled: true\n  policy:\n    kinds: {inference: {}}\n  workloads:\n    - name: chat\n      package: echo-llm\n" + refs
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(nodeConfig(dataDir, peers+body)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", workloads("      prefer: [gpu, self, e2e, "+self+"]\n"))
	if out, errOut, rc := runCLI(t, "config", "check", good); rc != 0 {
		t.Fatalf("config check of known refs = %d %q %q", rc, out, errOut)
	}
	bad := write("bad.yaml", workloads("      node: gpu-9\n"))
	_, errOut, rc := runCLI(t, "config", "check", bad)
	if rc != 2 || !strings.Contains(errOut, `line 25: controller.workloads[0].node: "gpu-9" names no known node`) {
		t.Fatalf("config check of an unknown node = %d %q", rc, errOut)
	}
	bad = write("bad2.yaml", workloads("      avoid: [n-0123456789abcdef]\n"))
	if _, errOut, rc = runCLI(t, "config", "check", bad); rc != 2 || !strings.Contains(errOut, `controller.workloads[0].avoid[0]: "n-0123456789abcdef" names no known node`) {
		t.Fatalf("config check of an unknown id = %d %q", rc, errOut)
	}

	// A reload refuses it too.
	n := startNode(t, nodeConfig("%s", workloads("")), nil)
	n.rewrite(nodeConfig("%s", workloads("      prefer: [ghost]\n")))
	n.n.reloader.Reload()
	st := n.n.status().(*operator.StatusDoc)
	if st.Config.LastReloadSuccessful || !strings.Contains(st.Config.LastReloadError, `"ghost" names no known node`) {
		t.Fatalf("reload with an unknown prefer: ok %v, error %q", st.Config.LastReloadSuccessful, st.Config.LastReloadError)
	}
}
