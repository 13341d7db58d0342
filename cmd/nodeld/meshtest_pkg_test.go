package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// publisher signs the packages of a meshtest test.
type publisher struct {
	t      *testing.T
	key    string // private key file
	anchor string // public key hex
	root   string
}

func newPublisher(t *testing.T) *publisher {
	t.Helper()
	root := t.TempDir()
	key := filepath.Join(root, "publisher.key")
	out, errOut, rc := runCLI(t, "package", "keygen", "--out", key)
	if rc != 0 {
		t.Fatalf("package keygen: %q", errOut)
	}
	return &publisher{t: t, key: key, anchor: strings.TrimSpace(out), root: root}
}

// build makes a signed package in a directory named name from a manifest
// template and files (the echo-llm binary is added as "echo-llm", with
// mode 0755 like every file here).
func (p *publisher) build(name, manifest string, files map[string]string) string {
	t := p.t
	t.Helper()
	dir := filepath.Join(p.root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(echoBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "echo-llm"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for n, content := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tmpl := filepath.Join(p.root, name+".manifest.json")
	if err := os.WriteFile(tmpl, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"package", "build", "--manifest", tmpl, dir},
		{"package", "sign", "--key", p.key, dir},
	} {
		if _, errOut, rc := runCLI(t, args...); rc != 0 {
			t.Fatalf("%v: %q", args, errOut)
		}
	}
	return dir
}

// echoManifest is an echo-llm manifest of package id with the variants
// given (JSON objects), running command (echo-llm or a script of the
// package).
func echoManifest(id, command, variants string) string {
	return `{
  "schema": 1,
  "id": "` + id + `",
  "version": "0.1.0",
  "kind": "inference",
  "role": "chat",
  "runtime": {
    "type": "process",
    "command": "` + command + `",
    "args": ["--listen", "127.0.0.1:{port}", "--model", "echo-1"],
    "health": {"path": "/health"}
  },
  "variants": [` + variants + `],
  "files": []
}`
}

// defaultVariant is the echo-llm example's variant.
const defaultVariant = `{"name": "default", "requires": {"os": ["linux"], "runtimes": ["process"]}, "resources": {"mem_bytes": 67108864, "cpu_millis": 100}}`
