package pkg

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeld/nodeld/internal/grammar"
)

// testKey makes a fresh ed25519 key.
func testKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// testManifest is a valid process package running bin/serve.
func testManifest() Manifest {
	return Manifest{
		ID:      "echo",
		Version: "1.0.0",
		Kind:    KindInference,
		Role:    "chat",
		Runtime: Runtime{
			Type:    grammar.RuntimeProcess,
			Command: "bin/serve",
			Args:    []string{"--port", "{port}"},
			Env:     map[string]string{"MODE": "test"},
			Health:  &Health{Path: "/health"},
		},
		Variants: []Variant{{
			Name:      "cpu",
			Requires:  Requires{Arch: []string{"amd64", "arm64"}, OS: []string{"linux"}},
			Resources: Resources{MemBytes: 64 << 20},
		}},
	}
}

// writeFiles writes files (path -> content) under dir.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if filepath.Base(filepath.Dir(full)) == "bin" {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// makePackage builds and signs a package in a fresh directory and
// returns the directory.
func makePackage(t testing.TB, key ed25519.PrivateKey) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"bin/serve":       "#!/bin/sh\necho hi\n",
		"data/model.bin":  "weights weights weights",
		"data/README.txt": "hello",
	})
	if _, err := Build(dir, testManifest()); err != nil {
		t.Fatal(err)
	}
	if err := Sign(dir, key); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeSigned writes manifest bytes and a signature by key over them,
// bypassing Build and Sign's validation, as an attacker could.
func writeSigned(t testing.TB, dir string, manifest []byte, key ed25519.PrivateKey) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	sig := `{"signatures":[{"key":"` + hexOf(pubOf(key)) + `","sig":"` + hexOf(signManifest(key, manifest)) + `"}]}`
	if err := os.WriteFile(filepath.Join(dir, SignatureFile), []byte(sig), 0o644); err != nil {
		t.Fatal(err)
	}
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }
