package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPeerRemovedByReload: taking a peer out of the config and sending
// SIGHUP closes its link and stops it resolving at once.
func TestPeerRemovedByReload(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	meshAddr := map[string]string{"a": freeUDPAddr(t), "b": freeUDPAddr(t), "c": freeUDPAddr(t)}
	upstream := freeAddr(t)
	startEcho(t, upstream)
	dirA, dirC := filepath.Join(root, "a"), filepath.Join(root, "c")
	a := startDaemon(t, dirA, clusterNode("a", dirA, meshAddr["a"], map[string]string{"c": meshAddr["c"]},
		fmt.Sprintf("    - name: chat\n      listen: 127.0.0.1:0\n      expose: true\n      serve_to: [c]\n  instances:\n    - role: chat\n      runtime: openai\n      url: http://%s\n", upstream)))
	// C knows A and a second peer B (never started), so removing A leaves
	// a mesh with peers.
	c := startDaemon(t, dirC, clusterNode("c", dirC, meshAddr["c"], map[string]string{"a": meshAddr["a"], "b": meshAddr["b"]},
		"    - name: chat\n      listen: 127.0.0.1:0\n      use_from: [a]\n"))
	a.waitReady()
	c.waitReady()
	waitFor(t, "C to resolve chat to A", func() bool { return strings.HasPrefix(c.status().Roles[0].Resolved, "remote ") })
	base := "http://" + c.status().Roles[0].Listen
	if code, _ := httpGet(t, base+"/v1/models"); code != http.StatusOK {
		t.Fatalf("C before the reload: %d", code)
	}

	next := clusterNode("c", dirC, meshAddr["c"], map[string]string{"b": meshAddr["b"]},
		"    - name: chat\n      listen: 127.0.0.1:0\n") // unchanged: the listener stays
	if err := os.WriteFile(c.cfgPath, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	c.signal(syscall.SIGHUP)
	c.waitLog("config reloaded")
	st := c.status()
	if st.Roles[0].Resolved != "" {
		t.Fatalf("chat still resolves to %q after A was removed", st.Roles[0].Resolved)
	}
	for _, p := range st.Mesh.Peers {
		if p.Name == "a" {
			t.Fatalf("A still listed after the reload: %+v", p)
		}
	}
	if code, body := httpGet(t, base+"/v1/models"); code != http.StatusServiceUnavailable {
		t.Fatalf("C after the reload: %d %q, want 503", code, body)
	}
	// A sees its link to C go.
	waitFor(t, "A losing its link to C", func() bool {
		for _, p := range a.status().Mesh.Peers {
			if p.Name == "c" {
				return p.State != "connected"
			}
		}
		return false
	})
	for _, d := range []*proc{a, c} {
		d.signal(syscall.SIGTERM)
		if code := d.wait(); code != 0 {
			t.Fatalf("exit = %d", code)
		}
	}
}
