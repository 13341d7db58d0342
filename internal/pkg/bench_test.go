package pkg

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkVerifyDir verifies a signed package holding one 64 MiB file;
// the reported MB/s is the hashing rate VerifyDir achieves.
func BenchmarkVerifyDir(b *testing.B) {
	const size = 64 << 20
	key := testKey(b)
	dir := b.TempDir()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 31)
	}
	writeFiles(b, dir, map[string]string{"bin/serve": "#!/bin/sh\n"})
	if err := os.WriteFile(filepath.Join(dir, "model.gguf"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	if _, err := Build(dir, testManifest()); err != nil {
		b.Fatal(err)
	}
	if err := Sign(dir, key); err != nil {
		b.Fatal(err)
	}
	anchors := Anchors{pubOf(key)}
	b.SetBytes(size)
	for b.Loop() {
		if _, err := VerifyDir(dir, anchors, nil); err != nil {
			b.Fatal(err)
		}
	}
}
