package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitFor polls cond until it holds or the deadline passes. It is for
// conditions only another process can change (a peer's state over the
// mesh), where there is no event to wait on.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// clusterAddrs reserves a mesh address for each of the nodes a, b and c,
// and returns them with others(self), the peers' addresses of one node.
func clusterAddrs(t *testing.T) (meshAddr map[string]string, others func(self string) map[string]string) {
	t.Helper()
	meshAddr = map[string]string{"a": freeUDPAddr(t), "b": freeUDPAddr(t), "c": freeUDPAddr(t)}
	return meshAddr, func(self string) map[string]string {
		m := map[string]string{}
		for k, v := range meshAddr {
			if k != self {
				m[k] = v
			}
		}
		return m
	}
}

// clusterNode renders one node of a three-node loopback cluster whose
// peers are pinned on first contact, as in configs/cluster/.
func clusterNode(name, dataDir, meshAddr string, peers map[string]string, role string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node:\n  name: %s\n  data_dir: %s\nlog:\n  level: debug\n  format: json\nadmin:\n  listen: 127.0.0.1:0\n", name, dataDir)
	fmt.Fprintf(&b, "mesh:\n  listen: %s\n  keepalive: 1s\n  peers:\n", meshAddr)
	for _, p := range []string{"a", "b", "c"} {
		if addr, ok := peers[p]; ok {
			fmt.Fprintf(&b, "    - name: %s\n      addr: %s\n      tier: paired\n", p, addr)
		}
	}
	// Holding off: these tests check what a consumer answers once
	// nothing serves the role (503 at once, as with proxy.hold.max_wait 0).
	b.WriteString("proxy:\n  hold:\n    max_wait: 0s\n")
	b.WriteString("inference:\n  probe_interval: 300ms\n  roles:\n")
	b.WriteString(role)
	return b.String()
}

// TestClusterServesRoleOverMesh is the three-node acceptance: C has no
// model; A and B serve role chat to C over the mesh; curl and the openai
// client on C's role port get the peers' answers, streaming included;
// stopping the serving node fails over to the other; stopping both makes
// C answer 503.
func TestClusterServesRoleOverMesh(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	meshAddr, others := clusterAddrs(t)
	echoA, echoB := freeAddr(t), freeAddr(t)
	startEcho(t, echoA)
	startEcho(t, echoB)
	serving := func(upstream string) string {
		return fmt.Sprintf("    - name: chat\n      listen: 127.0.0.1:0\n      expose: true\n      serve_to: [c]\n  instances:\n    - role: chat\n      runtime: openai\n      url: http://%s\n", upstream)
	}
	nodes := map[string]*proc{}
	for _, n := range []string{"a", "b"} {
		up := echoA
		if n == "b" {
			up = echoB
		}
		dir := filepath.Join(root, n)
		nodes[n] = startDaemon(t, dir, clusterNode(n, dir, meshAddr[n], others(n), serving(up)))
	}
	dirC := filepath.Join(root, "c")
	nodes["c"] = startDaemon(t, dirC, clusterNode("c", dirC, meshAddr["c"], others("c"),
		"    - name: chat\n      listen: 127.0.0.1:0\n      use_from: [a, b]\n"))
	ids := map[string]string{}
	for n, d := range nodes {
		d.waitReady()
		ids[d.status().NodeID] = n
	}

	c := nodes["c"]
	// A node with the mesh exposes its metrics in valid exposition format.
	code, metrics := httpGet(t, "http://"+c.admin+"/metrics")
	if code != 200 || !strings.Contains(metrics, "nodeld_mesh_peers{") || !strings.Contains(metrics, "nodeld_mesh_bytes_total{") {
		t.Fatalf("C /metrics = %d, mesh metrics missing", code)
	}
	promtoolCheck(t, metrics)
	resolved := func() string {
		st := c.status()
		if len(st.Roles) == 0 {
			return ""
		}
		return st.Roles[0].Resolved
	}
	waitFor(t, "C to resolve chat to a peer", func() bool { return strings.HasPrefix(resolved(), "remote ") })
	base := "http://" + c.status().Roles[0].Listen

	first := strings.TrimPrefix(resolved(), "remote ")
	out := curl(t, "-sS", "-i", base+"/v1/chat/completions", "-H", "Content-Type: application/json",
		"-H", "Authorization: Bearer secret-never-forwarded",
		"-d", `{"model":"anything","messages":[{"role":"user","content":"over the mesh"}]}`)
	if !strings.Contains(out, "HTTP/1.1 200") || !strings.Contains(out, "echo: over the mesh") ||
		!strings.Contains(strings.ToLower(out), "x-nodeld-route: "+first) {
		t.Fatalf("curl via C:\n%s", out)
	}
	out = curl(t, "-sS", "-N", base+"/v1/chat/completions", "-H", "Content-Type: application/json",
		"-d", `{"stream":true,"messages":[{"role":"user","content":"one two three four"}]}`)
	if strings.Count(out, "data: ") < 6 || !strings.HasSuffix(strings.TrimSpace(out), "data: [DONE]") {
		t.Fatalf("curl stream via C:\n%s", out)
	}
	res := openaiClient(t, base+"/v1")
	if res["chat"] != "echo: hello from node" || res["stream_text"] != "echo: stream these words please" {
		t.Fatalf("openai client via C: %v", res)
	}

	// Stop the serving node: C fails over to the other peer.
	servingName := ids[first]
	nodes[servingName].signal(syscall.SIGTERM)
	if code := nodes[servingName].wait(); code != 0 {
		t.Fatalf("node %s exit = %d", servingName, code)
	}
	waitFor(t, "C to fail over", func() bool {
		r := resolved()
		return strings.HasPrefix(r, "remote ") && !strings.HasSuffix(r, first)
	})
	code, body := httpGet(t, base+"/v1/models")
	if code != http.StatusOK || !strings.Contains(body, "echo-e2e") {
		t.Fatalf("after failover: %d %q", code, body)
	}

	// Stop the other one too: nothing serves chat for C.
	other := "a"
	if servingName == "a" {
		other = "b"
	}
	nodes[other].signal(syscall.SIGTERM)
	if code := nodes[other].wait(); code != 0 {
		t.Fatalf("node %s exit = %d", other, code)
	}
	waitFor(t, "C to have no target", func() bool { return resolved() == "" })
	code, body = httpGet(t, base+"/v1/models")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no instance serves role 'chat'") {
		t.Fatalf("with both peers down: %d %q", code, body)
	}
	c.signal(syscall.SIGTERM)
	if code := c.wait(); code != 0 {
		t.Fatalf("node c exit = %d", code)
	}
}
