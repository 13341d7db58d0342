package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIPackageAdd: nodeld package add verifies a package against the
// config's trust anchors and copies it into <data_dir>/store; adding it
// again changes nothing; another package under the same version, a
// foreign signer and a config without anchors are refused, and the store
// is left as it was.
func TestCLIPackageAdd(t *testing.T) {
	t.Parallel()
	tmp, dir, keyOut, _, rc := newPackageWork(t)
	anchor := strings.TrimSpace(keyOut)
	if rc != 0 {
		t.Fatal("keygen failed")
	}
	build := func() {
		t.Helper()
		if _, errOut, rc := runCLI(t, "package", "build", "--manifest", "../../examples/packages/echo-llm/manifest.template.json", dir); rc != 0 {
			t.Fatalf("build = %d %q", rc, errOut)
		}
		if _, errOut, rc := runCLI(t, "package", "sign", "--key", filepath.Join(tmp, "pub.key"), dir); rc != 0 {
			t.Fatalf("sign = %d %q", rc, errOut)
		}
	}
	build()
	dataDir := filepath.Join(tmp, "data")
	cfg := filepath.Join(tmp, "n.yaml")
	if err := os.WriteFile(cfg, []byte(nodeConfig(dataDir, "host:\n  trust_anchors: ["+anchor+"]\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, rc := runCLI(t, "package", "add", "--config", cfg, dir)
	stored := filepath.Join(dataDir, "store", "echo-llm", "0.1.0")
	if rc != 0 || !strings.Contains(out, "stored echo-llm 0.1.0") || !strings.Contains(out, stored) {
		t.Fatalf("add = %d %q %q", rc, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(stored, "echo-llm")); err != nil {
		t.Fatalf("stored file: %v", err)
	}
	if out, _, rc := runCLI(t, "package", "verify", "--anchor", anchor, stored); rc != 0 {
		t.Fatalf("the stored copy does not verify: %q", out)
	}
	if out, errOut, rc := runCLI(t, "package", "add", "--config", cfg, dir); rc != 0 || !strings.Contains(out, "already stored") {
		t.Fatalf("second add = %d %q %q", rc, out, errOut)
	}
	manifest, err := os.ReadFile(filepath.Join(stored, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}

	// Another package under the same id and version.
	if err := os.WriteFile(filepath.Join(dir, "echo-llm"), []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	build()
	if _, errOut, rc := runCLI(t, "package", "add", "--config", cfg, dir); rc != 1 || !strings.Contains(errOut, "different package") {
		t.Fatalf("add of a changed package under the same version = %d %q", rc, errOut)
	}
	// A signer the config does not trust.
	other, _, _ := runCLI(t, "package", "keygen", "--out", filepath.Join(tmp, "other.key"))
	if _, errOut, rc := runCLI(t, "package", "add", "--config", cfg, "--anchor", strings.TrimSpace(other), dir); rc != 1 || !strings.Contains(errOut, "untrusted_signer") {
		t.Fatalf("add with a foreign anchor = %d %q", rc, errOut)
	}
	// controller.trust_anchors, when set, are the store's anchors (the
	// controller places from it), not host.trust_anchors.
	ctlCfg := filepath.Join(tmp, "controller.yaml")
	if err := os.WriteFile(ctlCfg, []byte(nodeConfig(dataDir, "host:\n  trust_anchors: ["+anchor+"]\ncontroller:\n  trust_anchors: ["+strings.TrimSpace(other)+"]\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, rc := runCLI(t, "package", "add", "--config", ctlCfg, dir); rc != 1 || !strings.Contains(errOut, "untrusted_signer") {
		t.Fatalf("add under controller.trust_anchors of another signer = %d %q", rc, errOut)
	}
	if after, err := os.ReadFile(filepath.Join(stored, "manifest.json")); err != nil || string(after) != string(manifest) {
		t.Fatalf("the stored package changed: %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(dataDir, "store", "echo-llm"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("store entries %v, %v", entries, err)
	}
	// No anchors at all: a usage error.
	bare := filepath.Join(tmp, "bare.yaml")
	if err := os.WriteFile(bare, []byte(nodeConfig(dataDir, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, rc := runCLI(t, "package", "add", "--config", bare, dir); rc != 2 || !strings.Contains(errOut, "no trust anchors") {
		t.Fatalf("add without anchors = %d %q", rc, errOut)
	}
}
