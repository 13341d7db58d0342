package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// preKey makes a node's key before its first start, so other nodes'
// configs can name it, and returns the public key hex.
func preKey(t *testing.T, dataDir string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "keygen.yaml")
	if err := os.WriteFile(cfg, []byte(nodeConfig(dataDir, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, rc := runCLI(t, "keygen", "--config", cfg)
	if rc != 0 {
		t.Fatalf("keygen: %q", errOut)
	}
	return regexp.MustCompile(`public key: ([0-9a-f]{64})`).FindStringSubmatch(out)[1]
}

// TestPlaceOnPeerServedToThirdNode: the operator on A places a signed
// package on B over the mesh; B starts it and serves role chat to C,
// whose role port answers through B. A node that is not B's controller is
// refused; stopping the instance makes C answer 503.
func TestPlaceOnPeerServedToThirdNode(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	pkgDir, anchor := meshEchoPackage(t)
	dirs := map[string]string{"a": filepath.Join(root, "a"), "b": filepath.Join(root, "b"), "c": filepath.Join(root, "c")}
	keyA := preKey(t, dirs["a"])
	meshAddr := map[string]string{"a": freeUDPAddr(t), "b": freeUDPAddr(t), "c": freeUDPAddr(t)}
	peersOf := func(self string) map[string]string {
		m := map[string]string{}
		for k, v := range meshAddr {
			if k != self {
				m[k] = v
			}
		}
		return m
	}
	roleA := "    - name: other\n      listen: 127.0.0.1:0\n"
	roleB := "    - name: chat\n      listen: 127.0.0.1:0\n      expose: true\n      serve_to: [c]\n"
	roleC := "    - name: chat\n      listen: 127.0.0.1:0\n      use_from: [b]\n"
	hostB := fmt.Sprintf("host:\n  enabled: true\n  controllers: [%s]\n  trust_anchors: [%s]\n", keyA, anchor)
	nodes := map[string]*proc{
		"a": startDaemon(t, dirs["a"], clusterNode("a", dirs["a"], meshAddr["a"], peersOf("a"), roleA)),
		"b": startDaemon(t, dirs["b"], clusterNode("b", dirs["b"], meshAddr["b"], peersOf("b"), roleB)+hostB),
		"c": startDaemon(t, dirs["c"], clusterNode("c", dirs["c"], meshAddr["c"], peersOf("c"), roleC)),
	}
	for _, d := range nodes {
		d.waitReady()
	}
	a, c := nodes["a"], nodes["c"]
	waitFor(t, "A's link to B", func() bool {
		for _, p := range a.status().Mesh.Peers {
			if p.Name == "b" && p.State == "connected" {
				return true
			}
		}
		return false
	})

	// C is no controller of B: refused, exit 1.
	if _, errOut, rc := runCLI(t, "ctl", "--config", c.cfgPath, "place", "b", pkgDir); rc != 1 || !strings.Contains(errOut+"", "unauthorized") {
		out, _, _ := runCLI(t, "ctl", "--config", c.cfgPath, "place", "b", pkgDir)
		t.Fatalf("place from C = %d %q %q, want refused unauthorized", rc, errOut, out)
	}
	out, errOut, rc := runCLI(t, "ctl", "--config", a.cfgPath, "place", "b", pkgDir)
	if rc != 0 {
		t.Fatalf("place from A = %d\n%s\n%s\nB logs:\n%s", rc, out, errOut, nodes["b"].logText())
	}
	inst := regexp.MustCompile(`echo-llm-[0-9a-f]{8}-n-[0-9a-f]{16}`).FindString(out)

	resolved := func() string { return c.status().Roles[0].Resolved }
	waitFor(t, "C to resolve chat to B", func() bool { return strings.HasPrefix(resolved(), "remote ") })
	base := "http://" + c.status().Roles[0].Listen
	out = curl(t, "-sS", "-i", base+"/v1/chat/completions", "-H", "Content-Type: application/json",
		"-d", `{"messages":[{"role":"user","content":"placed on b"}]}`)
	if !strings.Contains(out, "echo: placed on b") || !strings.Contains(strings.ToLower(out), "x-nodeld-route: "+strings.TrimPrefix(resolved(), "remote ")) {
		t.Fatalf("C's role port:\n%s", out)
	}
	if out, errOut, rc := runCLI(t, "ctl", "--config", a.cfgPath, "status", "b"); rc != 0 || !strings.Contains(out, inst) {
		t.Fatalf("status b = %d %q %q", rc, out, errOut)
	}
	// A, B's controller, revokes the publisher with a signed notice over
	// the mesh: B applies it, tears the instance down, and C loses chat.
	out, errOut, rc = runCLI(t, "package", "revoke", "--config", a.cfgPath, "--mesh", "--kind", "signer", "--reason", "leaked", anchor)
	if rc != 0 {
		t.Fatalf("revoke --mesh = %d %q %q", rc, out, errOut)
	}
	waitFor(t, "C to lose chat after the revocation", func() bool { return resolved() == "" })
	if code, body := httpGet(t, base+"/v1/models"); code != 503 {
		t.Fatalf("C after the revocation: %d %q", code, body)
	}
	if _, errOut, rc := runCLI(t, "ctl", "--config", a.cfgPath, "place", "b", pkgDir); rc != 1 || !strings.Contains(errOut, "governance") {
		t.Fatalf("place of the revoked package on b = %d %q, want refused governance", rc, errOut)
	}
	for _, n := range []string{"a", "b", "c"} {
		nodes[n].signal(syscall.SIGTERM)
		if code := nodes[n].wait(); code != 0 {
			t.Fatalf("node %s exit = %d", n, code)
		}
	}
}
