package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
)

// TestOwnNameWithoutController: on a node that runs no controller, its
// own node.name names it wherever a NODE goes (config.ResolveNodeRef,
// the one resolver): ctl describe, status, place and stop by name reach
// its host as "self" does.
func TestOwnNameWithoutController(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshEchoPackage(t)
	cl := newCtlCluster(t, "a")
	a := startNodeAt(t, cl.dirs["a"], cl.config("a", nil, hostSection(cl.keys["a"], anchor), false), nil)
	sock := a.n.config().SocketPath()
	for _, verb := range []string{"describe", "status"} {
		if out, errOut, rc := runCtl(t, "--socket", sock, verb, "a"); rc != 0 {
			t.Fatalf("ctl %s a (node.name) = %d\n%s\n%s", verb, rc, out, errOut)
		}
	}
	out, errOut, rc := runCtl(t, "--socket", sock, "place", "a", pkgDir, "--no-start")
	if rc != 0 {
		t.Fatalf("ctl place a (node.name) = %d\n%s\n%s", rc, out, errOut)
	}
	inst := instanceIn(out)
	if inst == "" {
		t.Fatalf("ctl place printed no instance id:\n%s", out)
	}
	if out, errOut, rc := runCtl(t, "--socket", sock, "unload", "a", inst); rc != 0 {
		t.Fatalf("ctl unload a (node.name) = %d\n%s\n%s", rc, out, errOut)
	}
}

// TestOwnNameWithController: on a node that runs a controller and a
// host, its own node.name works in controller.workloads[].node (the
// declared workload is placed on it), in ctl place NODE and ctl status
// NODE, and in controller.policy.deny_nodes (a reload that denies it by
// name makes a dry run unplaceable there).
func TestOwnNameWithController(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshEchoPackage(t)
	cl := newCtlCluster(t, "a")
	ctrl := controllerSection(anchor, "200ms", "5s", "3s")
	cfg := func(extra string) string {
		return cl.config("a", nil, ctrl+extra+hostSection(cl.keys["a"], anchor), false)
	}
	a := startNodeAt(t, cl.dirs["a"], cfg(""), nil)
	sock := a.n.config().SocketPath()
	idA := a.n.id.ID()
	waitLong(t, "the controller to hear from its own host", func() bool {
		if _, _, rc := runCtl(t, "--socket", sock, "nodes"); rc != 0 {
			return false
		}
		var nodes []operator.NodeDoc
		ctlJSON(t, sock, &nodes, "nodes")
		return len(nodes) == 1 && nodes[0].Liveness == "alive" && nodes[0].HasFacts
	})
	// ctl place pinned by name, then status by name.
	out, _ := placeSettled(t, sock, idA, "a", pkgDir, "--no-start")
	inst := instanceIn(out)
	if out, errOut, rc := runCtl(t, "--socket", sock, "status", "a"); rc != 0 || !strings.Contains(out, inst) {
		t.Fatalf("ctl status a (node.name) = %d\n%s\n%s", rc, out, errOut)
	}
	if out, errOut, rc := runCtl(t, "--socket", sock, "unload", "a", inst); rc != 0 {
		t.Fatalf("ctl unload a (node.name) = %d\n%s\n%s", rc, out, errOut)
	}

	// A declared workload pinned to node.name is placed here.
	storeOut, errOut, rc := runCLI(t, "package", "add", "--config", a.cfgPath, pkgDir)
	if rc != 0 {
		t.Fatalf("package add = %d %q %q", rc, storeOut, errOut)
	}
	a.rewrite(cfg("  workloads:\n    - name: chat\n      package: echo-llm\n      node: a\n"))
	a.n.reloader.Reload()
	if st := a.n.status().(*operator.StatusDoc); !st.Config.LastReloadSuccessful {
		t.Fatalf("reload with workloads[].node: a: %s", st.Config.LastReloadError)
	}
	waitLong(t, "the workload pinned to node.name to be placed", func() bool {
		var ws []operator.WorkloadDoc
		ctlJSON(t, sock, &ws, "workloads")
		return len(ws) == 1 && ws[0].State == "placed"
	})

	// policy.deny_nodes by node.name: nothing more goes here.
	a.rewrite(cfg("    deny_nodes: [a]\n"))
	a.n.reloader.Reload()
	if st := a.n.status().(*operator.StatusDoc); !st.Config.LastReloadSuccessful {
		t.Fatalf("reload with deny_nodes: [a]: %s", st.Config.LastReloadError)
	}
	// The controller's loop takes the reloaded policy (Refresh hands it
	// over): a dry run may come before it does.
	waitLong(t, "the controller to take deny_nodes", func() bool {
		out, errOut, rc = runCtl(t, "--socket", sock, "place", "--dry-run", pkgDir)
		return rc != 0 || strings.Contains(out, "UNPLACEABLE")
	})
	if rc != 0 || !strings.Contains(out, "UNPLACEABLE") || !strings.Contains(out, idA+" rejected") || !strings.Contains(out, "node is in policy.deny_nodes") {
		t.Fatalf("dry run with deny_nodes: [a] = %d, want %s rejected by deny_nodes\n%s\n%s", rc, idA, out, errOut)
	}
}

// instanceIn finds a placed echo-llm instance id in ctl's output.
func instanceIn(out string) string {
	return regexp.MustCompile(`echo-llm-[0-9a-f]{8}-n-[0-9a-f]{16}`).FindString(out)
}
