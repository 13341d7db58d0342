package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReadyWaitsForOperatorSocket: a node whose admin and proxy listeners
// are up but whose operator socket is not listening yet is not ready
// (/readyz names the socket, and no "ready" line or READY=1 goes out), so
// that a script waiting for readiness never runs nodeld ctl against a
// socket that is not there; once the socket listens, the node is ready and
// ctl reaches it.
func TestReadyWaitsForOperatorSocket(t *testing.T) {
	t.Parallel()
	tn := buildNode(t, t.TempDir(), `node: {data_dir: %s}
log: {level: info, format: json}
admin: {listen: "127.0.0.1:0"}
inference:
  roles:
    - {name: chat, listen: "127.0.0.1:0"}
`, nil)
	n := tn.n
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 4)
	running := 0
	start := func(run func(context.Context) error) {
		running++
		go func() { errs <- run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range running {
			select {
			case err := <-errs:
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(waitTimeout):
				t.Error("a component did not stop")
				return
			}
		}
	})
	// Everything supervise waits for but the operator socket.
	start(n.admin.Run)
	start(n.proxy.Run)
	start(func(ctx context.Context) error { return n.supervise(ctx, nil) })

	waitFor(t, "every condition but the operator socket", func() bool {
		ok, unmet := n.admin.Ready()
		return !ok && slices.Equal(unmet, []string{"operator socket"})
	})
	if _, errOut, rc := runCtl(t, "--socket", n.config().SocketPath(), "status", "self"); rc != 3 || !strings.Contains(errOut, "cannot reach the daemon") {
		t.Fatalf("ctl status before the socket listens = %d %q, want 3", rc, errOut)
	}

	start(n.operator.Run)
	waitFor(t, "the node to be ready", func() bool {
		ok, _ := n.admin.Ready()
		return ok
	})
	select {
	case <-n.operator.Ready():
	default:
		t.Fatal("ready before the operator socket listens")
	}
	if _, errOut, rc := runCtl(t, "--socket", n.config().SocketPath(), "status", "self"); strings.Contains(errOut, "cannot reach the daemon") {
		t.Fatalf("ctl status once ready = %d %q", rc, errOut)
	}
}
