package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// newPackageWork is a temporary directory with pkg/echo-llm (a script
// that exits 0) and a publisher key made there by nodeld package keygen
// --out pub.key, whose output it returns.
func newPackageWork(t *testing.T) (tmp, dir, keyOut, errOut string, rc int) {
	t.Helper()
	tmp = t.TempDir()
	dir = filepath.Join(tmp, "pkg")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "echo-llm"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	keyOut, errOut, rc = runCLI(t, "package", "keygen", "--out", filepath.Join(tmp, "pub.key"))
	return tmp, dir, keyOut, errOut, rc
}

// TestCLIPackage drives the publisher workflow through the binary:
// keygen, build, sign, verify; then a tampered file, a foreign anchor and
// a revoked signer are each refused with exit 1 and the reason.
func TestCLIPackage(t *testing.T) {
	t.Parallel()
	tmp, dir, keyOut, errOut, rc := newPackageWork(t)
	anchor := strings.TrimSpace(keyOut)
	if rc != 0 || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(anchor) {
		t.Fatalf("keygen = %d %q %q", rc, keyOut, errOut)
	}
	if _, errOut, rc := runCLI(t, "package", "build", "--manifest", "../../examples/packages/echo-llm/manifest.template.json", dir); rc != 0 {
		t.Fatalf("build = %d %q", rc, errOut)
	}
	if _, errOut, rc := runCLI(t, "package", "verify", "--anchor", anchor, dir); rc != 1 || !strings.Contains(errOut, "bad_signature") {
		t.Fatalf("verify unsigned = %d %q, want exit 1 bad_signature", rc, errOut)
	}
	if _, errOut, rc := runCLI(t, "package", "sign", "--key", filepath.Join(tmp, "pub.key"), dir); rc != 0 {
		t.Fatalf("sign = %d %q", rc, errOut)
	}
	if out, errOut, rc := runCLI(t, "package", "verify", "--anchor", anchor, dir); rc != 0 || !strings.Contains(out, "ok: echo-llm 0.1.0") {
		t.Fatalf("verify = %d %q %q", rc, out, errOut)
	}
	other, _, _ := runCLI(t, "package", "keygen", "--out", filepath.Join(tmp, "other.key"))
	if _, errOut, rc := runCLI(t, "package", "verify", "--anchor", strings.TrimSpace(other), dir); rc != 1 || !strings.Contains(errOut, "untrusted_signer") {
		t.Fatalf("verify with a foreign anchor = %d %q", rc, errOut)
	}

	// Revocation through the node's data dir.
	dataDir := filepath.Join(tmp, "data")
	cfg := filepath.Join(tmp, "n.yaml")
	if err := os.WriteFile(cfg, []byte(nodeConfig(dataDir, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, rc := runCLI(t, "package", "revoke", "--config", cfg, "--kind", "signer", "--reason", "key leaked", anchor); rc != 0 {
		t.Fatalf("revoke = %d %q", rc, errOut)
	}
	rev := filepath.Join(dataDir, "revocations.json")
	if _, errOut, rc := runCLI(t, "package", "verify", "--anchor", anchor, "--revocations", rev, dir); rc != 1 || !strings.Contains(errOut, "revoked") {
		t.Fatalf("verify a revoked signer = %d %q", rc, errOut)
	}
	if out, _, rc := runCLI(t, "package", "revocations", "--config", cfg); rc != 0 || !strings.Contains(out, anchor) {
		t.Fatalf("revocations = %d %q", rc, out)
	}
	if _, errOut, rc := runCLI(t, "package", "unrevoke", "--config", cfg, "--kind", "signer", anchor); rc != 0 {
		t.Fatalf("unrevoke = %d %q", rc, errOut)
	}
	if _, errOut, rc := runCLI(t, "package", "verify", "--anchor", anchor, "--revocations", rev, dir); rc != 0 {
		t.Fatalf("verify after unrevoke = %d %q", rc, errOut)
	}

	// A tampered artifact is refused with its reason.
	if err := os.WriteFile(filepath.Join(dir, "echo-llm"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errOut, rc := runCLI(t, "package", "verify", "--anchor", anchor, dir); rc != 1 || !strings.Contains(errOut, "file_hash") {
		t.Fatalf("verify tampered = %d %q", rc, errOut)
	}
	if _, _, rc := runCLI(t, "package", "frob"); rc != 2 {
		t.Fatalf("unknown package verb exit = %d, want 2", rc)
	}
}

// A manifest template with anything after the manifest object is refused,
// a stray closing bracket included; the template as it is builds.
func TestPackageBuildRefusesTrailingData(t *testing.T) {
	t.Parallel()
	tmpl, err := os.ReadFile("../../examples/packages/echo-llm/manifest.template.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tail := range []string{"}", "]", "{}", "x", ""} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "echo-llm"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "template.json")
		if err := os.WriteFile(path, append(bytes.Clone(bytes.TrimSpace(tmpl)), tail...), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		err := run(context.Background(), []string{"package", "build", "--manifest", path, dir}, &out, &errb)
		if tail == "" {
			if err != nil {
				t.Fatalf("build from the template: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "trailing data") {
			t.Errorf("template + %q: %v, want trailing data refused", tail, err)
		}
		if _, serr := os.Stat(filepath.Join(dir, "manifest.json")); serr == nil {
			t.Errorf("template + %q: manifest.json written", tail)
		}
	}
}
