package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The packages of the meshtest tests are built and signed once per test
// binary, by one publisher, and shared (read only: hosts fetch copies).
// Hashing the echo-llm binary under -race takes seconds, which every
// test would otherwise pay. They live next to the binaries TestMain
// builds, and go with them.
var meshPackages struct {
	once   sync.Once
	pub    *publisher
	mu     sync.Mutex
	byName map[string]*sharedPackage
}

type sharedPackage struct {
	once sync.Once
	dir  string
}

// meshPackage is the shared signed package name, built from manifest and
// files on first use, and its publisher's key (the trust anchor).
func meshPackage(t testing.TB, name, manifest string, files map[string]string) (dir, anchor string) {
	t.Helper()
	mp := &meshPackages
	mp.once.Do(func() {
		root := filepath.Join(filepath.Dir(echoBinary(t)), "meshtest-packages")
		mp.pub = newPublisherAt(t, root)
		mp.byName = map[string]*sharedPackage{}
	})
	if mp.pub == nil {
		t.Fatal("the meshtest publisher could not be made (see the first test that tried)")
	}
	mp.mu.Lock()
	sp, ok := mp.byName[name]
	if !ok {
		sp = &sharedPackage{}
		mp.byName[name] = sp
	}
	mp.mu.Unlock()
	sp.once.Do(func() { sp.dir = mp.pub.build(t, name, manifest, files) })
	if sp.dir == "" {
		t.Fatalf("shared package %s could not be built (see the first test that tried)", name)
	}
	return sp.dir, mp.pub.anchor
}

// meshEchoPackage is the echo-llm example package, signed.
func meshEchoPackage(t *testing.T) (dir, anchor string) {
	t.Helper()
	tmpl, err := os.ReadFile("../../examples/packages/echo-llm/manifest.template.json")
	if err != nil {
		t.Fatal(err)
	}
	return meshPackage(t, "echo-llm", string(tmpl), nil)
}

// lightScript is the start script of a light package: pre (shell lines),
// then the echo-llm binary built for the tests, outside the package. A
// light package is a few hundred bytes, so that places do not move and
// hash megabytes under -race; the real process still runs.
func lightScript(t *testing.T, pre string) string {
	return "#!/bin/sh\n" + pre + "exec '" + echoBinary(t) + "' \"$@\"\n"
}

// meshLightPackage is the echo-llm package in its light form: a start
// script that runs the test's echo-llm binary.
func meshLightPackage(t *testing.T) (dir, anchor string) {
	t.Helper()
	return meshPackage(t, "echo-light", echoManifest("echo-light", "start.sh", defaultVariant), map[string]string{"start.sh": lightScript(t, "")})
}

// publisher signs packages.
type publisher struct {
	key    string // private key file
	anchor string // public key hex
	root   string
}

func newPublisherAt(t testing.TB, root string) *publisher {
	t.Helper()
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(root, "publisher.key")
	out, errOut, rc := runCLI(t, "package", "keygen", "--out", key)
	if rc != 0 {
		t.Fatalf("package keygen: %q", errOut)
	}
	return &publisher{key: key, anchor: strings.TrimSpace(out), root: root}
}

// build makes a signed package in a directory named name from a manifest
// template and files, each with mode 0755; without files, the package
// holds the echo-llm binary.
func (p *publisher) build(t testing.TB, name, manifest string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(p.root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if files == nil {
		bin, err := os.ReadFile(echoBinary(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "echo-llm"), bin, 0o755); err != nil {
			t.Fatal(err)
		}
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
