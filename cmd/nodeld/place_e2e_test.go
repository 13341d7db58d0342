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

// TestPlaceSelfThroughOperatorSocket drives the workload host through the
// binary: the operator signs a package, `nodeld ctl place self DIR` has the
// daemon fetch, verify and start it, its role serves through the role port,
// and stop and unload take it down.
func TestPlaceSelfThroughOperatorSocket(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dataDir := filepath.Join(tmp, "data")
	pkgDir := filepath.Join(tmp, "echo-llm")
	if err := os.MkdirAll(pkgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(echoBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkgDir, "echo-llm"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	anchorOut, errOut, rc := runCLI(t, "package", "keygen", "--out", filepath.Join(tmp, "publisher.key"))
	if rc != 0 {
		t.Fatalf("package keygen: %q", errOut)
	}
	anchor := strings.TrimSpace(anchorOut)
	if _, errOut, rc := runCLI(t, "package", "build", "--manifest", "../../examples/packages/echo-llm/manifest.template.json", pkgDir); rc != 0 {
		t.Fatalf("package build: %q", errOut)
	}
	if _, errOut, rc := runCLI(t, "package", "sign", "--key", filepath.Join(tmp, "publisher.key"), pkgDir); rc != 0 {
		t.Fatalf("package sign: %q", errOut)
	}

	// The node's own key must be a controller for it to place on itself.
	cfgPath := filepath.Join(tmp, "pre.yaml")
	base := nodeConfig(dataDir, "")
	if err := os.WriteFile(cfgPath, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, rc := runCLI(t, "keygen", "--config", cfgPath)
	if rc != 0 {
		t.Fatalf("keygen: %q", errOut)
	}
	nodeKey := regexp.MustCompile(`public key: ([0-9a-f]{64})`).FindStringSubmatch(out)[1]
	cfg := base + fmt.Sprintf("host:\n  enabled: true\n  controllers: [%s]\n  trust_anchors: [%s]\n", nodeKey, anchor)
	d := startDaemon(t, dataDir, cfg)
	d.waitReady()
	ctlArgs := func(args ...string) []string { return append([]string{"ctl", "--config", d.cfgPath}, args...) }

	out, errOut, rc = runCLI(t, ctlArgs("place", "self", pkgDir)...)
	if rc != 0 {
		t.Fatalf("ctl place self = %d\n%s\n%s\nlogs:\n%s", rc, out, errOut, d.logText())
	}
	inst := regexp.MustCompile(`echo-llm-[0-9a-f]{8}-n-[0-9a-f]{16}`).FindString(out)
	if inst == "" {
		t.Fatalf("ctl place printed no instance id:\n%s", out)
	}
	role := d.status().Roles[0]
	waitFor(t, "the placed instance to serve role chat", func() bool { return strings.HasPrefix(d.status().Roles[0].Resolved, "local ") })
	out = curl(t, "-sS", "http://"+role.Listen+"/v1/chat/completions", "-H", "Content-Type: application/json",
		"-d", `{"messages":[{"role":"user","content":"placed"}]}`)
	if !strings.Contains(out, "echo: placed") {
		t.Fatalf("role served by the placed instance: %s", out)
	}
	if out, errOut, rc := runCLI(t, ctlArgs("status", "self")...); rc != 0 || !strings.Contains(out, inst) {
		t.Fatalf("ctl status = %d %q %q", rc, out, errOut)
	}
	if out, errOut, rc := runCLI(t, "status", "--addr", d.admin); rc != 0 || !strings.Contains(out, "placed   "+inst) {
		t.Fatalf("nodeld status = %d %q %q, want the placed instance listed", rc, out, errOut)
	}
	if out, errOut, rc := runCLI(t, ctlArgs("--json", "describe", "self")...); rc != 0 || !strings.Contains(out, "mem_total_bytes") {
		t.Fatalf("ctl describe = %d %q %q", rc, out, errOut)
	}
	// A second place of the same workload is refused (exit 1, with its code).
	if _, errOut, rc := runCLI(t, ctlArgs("place", "self", pkgDir)...); rc != 1 {
		t.Fatalf("second place = %d %q, want a refusal", rc, errOut)
	}
	if out, errOut, rc := runCLI(t, ctlArgs("stop", "self", inst)...); rc != 0 {
		t.Fatalf("ctl stop = %d %q %q", rc, out, errOut)
	}
	waitFor(t, "the role to stop resolving", func() bool { return d.status().Roles[0].Resolved == "" })
	if out, errOut, rc := runCLI(t, ctlArgs("unload", "self", inst)...); rc != 0 {
		t.Fatalf("ctl unload = %d %q %q", rc, out, errOut)
	}
	// Revoking the publisher through the running daemon tears the
	// instance down and refuses the package from then on.
	if _, errOut, rc := runCLI(t, ctlArgs("place", "self", pkgDir)...); rc != 0 {
		t.Fatalf("place again = %d %q", rc, errOut)
	}
	waitFor(t, "the placed instance to serve again", func() bool { return strings.HasPrefix(d.status().Roles[0].Resolved, "local ") })
	out, errOut, rc = runCLI(t, "package", "revoke", "--config", d.cfgPath, "--kind", "signer", "--reason", "leaked", anchor)
	if rc != 0 || !strings.Contains(out, "applied by the running daemon") {
		t.Fatalf("package revoke = %d %q %q", rc, out, errOut)
	}
	waitFor(t, "the revoked instance to stop serving", func() bool { return d.status().Roles[0].Resolved == "" })
	if _, errOut, rc := runCLI(t, ctlArgs("place", "self", pkgDir)...); rc != 1 || !strings.Contains(errOut, "governance") {
		t.Fatalf("place of a revoked package = %d %q, want refused governance", rc, errOut)
	}
	// Unknown instance: a signed refusal, exit 1.
	if _, errOut, rc := runCLI(t, ctlArgs("start", "self", "nope-00000000-n-0000000000000000")...); rc != 1 {
		t.Fatalf("start unknown = %d %q", rc, errOut)
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit = %d", code)
	}
	// The host chained each step.
	kinds := strings.Join(chainKinds(t, filepath.Join(dataDir, chainFileName)), " ")
	for _, k := range []string{"dispatch.decision", "host.place.begin", "host.place.ok", "host.stop", "host.unload", "dispatch.revoke", "host.revoked.teardown"} {
		if !strings.Contains(kinds, k) {
			t.Errorf("chain lacks %s: %s", k, kinds)
		}
	}
}
