package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestShippedClusterConfigs runs configs/cluster/{a,b,c}.yaml exactly as
// the README's walk-through does (three processes, the files' own
// loopback ports; data in ./nodeld-data of a temp working directory):
// C, which has no model, is served role chat by A or B over the mesh.
func TestShippedClusterConfigs(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	cfgDir, err := filepath.Abs(filepath.Join("..", "..", "configs", "cluster"))
	if err != nil {
		t.Fatal(err)
	}
	// The files' ports are fixed: a second run of this test (another
	// go test process on the machine) waits for this one, not collides.
	holdPorts(t, shippedPorts...)
	startEcho(t, "127.0.0.1:8081")
	startEcho(t, "127.0.0.1:8082")
	nodes := map[string]*proc{}
	for _, n := range []string{"a", "b", "c"} {
		nodes[n] = startInDir(t, work, filepath.Join(cfgDir, n+".yaml"))
	}
	for _, d := range nodes {
		d.waitReady()
	}
	c := nodes["c"]
	if c.admin != "127.0.0.1:9467" {
		t.Fatalf("C's admin on %s, want the file's 127.0.0.1:9467", c.admin)
	}
	waitFor(t, "C to resolve chat to a peer", func() bool {
		st := c.status()
		return len(st.Roles) == 1 && strings.HasPrefix(st.Roles[0].Resolved, "remote ")
	})
	out := curl(t, "-sS", "-i", "http://127.0.0.1:8093/v1/chat/completions", "-H", "Content-Type: application/json",
		"-d", `{"messages":[{"role":"user","content":"from the shipped configs"}]}`)
	if !strings.Contains(out, "HTTP/1.1 200") || !strings.Contains(out, "echo: from the shipped configs") {
		t.Fatalf("C's role port:\n%s", out)
	}
	for _, n := range []string{"a", "b"} {
		if _, err := os.Stat(filepath.Join(work, "nodeld-data", n, "known_peers.json")); err != nil {
			t.Errorf("node %s pinned no peer on first contact: %v", n, err)
		}
	}
	for _, d := range nodes {
		d.signal(syscall.SIGTERM)
	}
	for n, d := range nodes {
		if code := d.wait(); code != 0 {
			t.Errorf("node %s exit = %d", n, code)
		}
	}
}

// shippedPorts are every port configs/cluster binds: admin, mesh, role
// ports, and the model servers the test starts.
var shippedPorts = []int{9465, 9466, 9467, 7401, 7402, 7403, 8091, 8092, 8093, 8081, 8082}

// startInDir runs nodeld on a config file as it is, from dir.
func startInDir(t *testing.T, dir, cfgPath string) *proc {
	t.Helper()
	d := &proc{t: t, cfgPath: cfgPath, done: make(chan struct{})}
	d.cmd = exec.Command(nodeldBinary(t), "run", "--config", cfgPath)
	d.cmd.Dir = dir
	d.launch()
	return d
}
