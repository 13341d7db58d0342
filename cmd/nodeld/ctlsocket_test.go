package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCtlMalformedConfigFallsBackToItsSocket: ctl --config FILE with a
// FILE that does not load (a refused reload's) still reaches the daemon
// through the socket path written in it, and says so; one whose socket
// cannot be read either says to pass --socket.
func TestCtlMalformedConfigFallsBackToItsSocket(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeConfig("%s", ""), nil)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	body := "node:\n  data_dir: " + n.n.config().Node.DataDir + "\ninference:\n  roles: [oops\n"
	if err := os.WriteFile(bad, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	// No controller here: the daemon's answer (no_controller, exit 1) is
	// proof enough that the socket was reached.
	out, errOut, rc := runCtl(t, "--config", bad, "placements")
	if rc != 1 || !strings.Contains(errOut, "does not load; using the operator socket written in it, "+n.n.config().SocketPath()) ||
		!strings.Contains(errOut, "no_controller") {
		t.Fatalf("ctl with a malformed config = %d %q %q", rc, out, errOut)
	}
	if err := os.WriteFile(bad, []byte("admin: {socket: /x}\nnode: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, rc = runCtl(t, "--config", bad, "placements"); rc != 2 || !strings.Contains(errOut, "pass --socket PATH") {
		t.Fatalf("ctl with an unreadable socket = %d %q", rc, errOut)
	}
}
