package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.bad.golden from the current output")

// TestGoldenBad loads every testdata/*.bad.yaml and compares the whole
// error text with testdata/*.bad.golden.
func TestGoldenBad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.bad.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.bad.yaml")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			_, err := Load(file)
			if err == nil {
				t.Fatalf("Load(%s) = nil error, want problems", file)
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden (run go test -update): %v", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("Load(%s) error mismatch (-want +got):\n%s", file, diff)
			}
		})
	}
}

// TestGoodFiles loads every testdata/*.good.yaml and every example in
// configs/ (recursively).
func TestGoodFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.good.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	examples := exampleFiles(t)
	if len(examples) < 4 {
		t.Fatalf("found %d example configs, want at least 4: %v", len(examples), examples)
	}
	for _, file := range append(files, examples...) {
		t.Run(file, func(t *testing.T) {
			if _, err := Load(file); err != nil {
				t.Errorf("Load(%s): %v", file, err)
			}
		})
	}
}

func exampleFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join("..", "..", "configs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk configs: %v", err)
	}
	return out
}
