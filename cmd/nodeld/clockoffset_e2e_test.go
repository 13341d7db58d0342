package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// chainRefusals returns the payloads of the chain entries of kind
// host.ctl.refused in the chain file at path.
func chainRefusals(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e struct {
			Kind    string         `json:"kind"`
			Payload map[string]any `json:"payload"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Kind == "host.ctl.refused" {
			out = append(out, e.Payload)
		}
	}
	return out
}

// TestClockOffsetSkewsCtl: --test-clock-offset shifts the clock a node
// signs and checks workload.ctl calls with. A, ten minutes ahead, is
// refused as expired by B (chained on B), and refuses B's calls the same
// way; its calls to itself, signed and checked with the same shifted
// clock, pass. Without the flag's wiring both describes would succeed.
func TestClockOffsetSkewsCtl(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	meshAddr, others := clusterAddrs(t)
	delete(meshAddr, "c")
	role := "    - name: chat\n      listen: 127.0.0.1:0\n"
	dirA, dirB := filepath.Join(root, "a"), filepath.Join(root, "b")
	peers := func(self string) map[string]string {
		m := others(self)
		delete(m, "c")
		return m
	}
	a := startDaemon(t, dirA, clusterNode("a", dirA, meshAddr["a"], peers("a"), role), "--test-clock-offset", "10m")
	b := startDaemon(t, dirB, clusterNode("b", dirB, meshAddr["b"], peers("b"), role))
	a.waitReady()
	b.waitReady()
	a.waitLog("test clock offset in force: workload.ctl calls are signed and checked with a shifted clock")
	waitFor(t, "A's link to B", func() bool {
		for _, p := range a.status().Mesh.Peers {
			if p.Name == "b" && p.State == "connected" {
				return true
			}
		}
		return false
	})

	if out, errOut, rc := runCLI(t, "ctl", "--config", a.cfgPath, "describe", "b"); rc != 1 || !strings.Contains(errOut, "expired") {
		t.Fatalf("describe b from the skewed A = %d %q %q, want refused expired", rc, out, errOut)
	}
	if out, errOut, rc := runCLI(t, "ctl", "--config", b.cfgPath, "describe", "a"); rc != 1 || !strings.Contains(errOut, "expired") {
		t.Fatalf("describe a from B = %d %q %q, want refused expired by the skewed A", rc, out, errOut)
	}
	if out, errOut, rc := runCLI(t, "ctl", "--config", a.cfgPath, "describe", "self"); rc != 0 {
		t.Fatalf("describe self on the skewed A = %d %q %q, want ok", rc, out, errOut)
	}
	idA := a.status().NodeID
	for _, d := range []*proc{a, b} {
		d.signal(syscall.SIGTERM)
		if code := d.wait(); code != 0 {
			t.Fatalf("exit = %d", code)
		}
	}
	refusals := chainRefusals(t, filepath.Join(dirB, chainFileName))
	found := false
	for _, p := range refusals {
		found = found || (p["code"] == "expired" && p["method"] == "workload.describe" && p["peer"] == idA)
	}
	if !found {
		t.Errorf("B's chain has no host.ctl.refused entry of A's describe with code expired: %v", refusals)
	}
	// The offset is on A's record of its start.
	if kinds := chainKinds(t, filepath.Join(dirA, chainFileName)); !strings.Contains(clockFileText(t, filepath.Join(dirA, chainFileName)), `"test_clock_offset":"10m0s"`) {
		t.Errorf("A's node.start does not record the offset; kinds %v", kinds)
	}
}

func clockFileText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
