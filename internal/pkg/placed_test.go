package pkg

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestPlacedStoreKeepsWhatWasVerified: Keep copies the verified package
// into <root>/<manifest hash> (the copy verifies, unlisted files are
// left out), keeping it again changes nothing, and the copy stays what
// was placed whatever becomes of the source (moved, re-signed as
// another version). A file changed between verify and keep is refused.
// Prune removes what is not used and what a crash left; the bound holds.
func TestPlacedStoreKeepsWhatWasVerified(t *testing.T) {
	key := testKey(t)
	anchors := Anchors{pubOf(key)}
	src := makeVersion(t, key, "echo", "0.1.0", "one")
	writeFiles(t, src, map[string]string{"notes.txt": "not listed"})
	v, err := VerifyDir(src, anchors, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := NewPlacedStore(filepath.Join(t.TempDir(), PlacedDir))
	dir, err := s.Keep(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	if dir != s.Dir(v.ManifestHash) {
		t.Fatalf("kept in %s", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unlisted file kept: %v", err)
	}
	// The source is replaced by a re-signed 0.2.0 and moved away.
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	kv, err := VerifyDir(dir, anchors, nil)
	if err != nil || kv.ManifestHash != v.ManifestHash || kv.Manifest.Version != "0.1.0" {
		t.Fatalf("kept copy: %v, %+v", err, kv)
	}
	if again, err := s.Keep(t.Context(), kv); err != nil || again != dir {
		t.Fatalf("kept again: %s, %v", again, err)
	}

	// A file that changed after it was verified is not kept.
	src2 := makeVersion(t, key, "echo", "0.2.0", "two")
	v2, err := VerifyDir(src2, anchors, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, src2, map[string]string{"data/model.bin": "tw0"})
	if _, err := s.Keep(t.Context(), v2); ErrorCode(err) != CodeFileHash {
		t.Fatalf("changed file kept: %v", err)
	}
	if _, err := os.Stat(s.Dir(v2.ManifestHash)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused copy left behind: %v", err)
	}

	// A crash left a half copy; prune removes it and what is unused.
	if err := os.MkdirAll(filepath.Join(s.Root(), keepTempPrefix+"x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(func(h string) bool { return h == v.ManifestHash }); err != nil || n != 0 {
		t.Fatalf("prune of the used one: %d, %v", n, err)
	}
	if ents, _ := os.ReadDir(s.Root()); len(ents) != 1 {
		t.Fatalf("after prune: %v", ents)
	}
	if n, err := s.Prune(func(string) bool { return false }); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	if ents, _ := os.ReadDir(s.Root()); len(ents) != 0 {
		t.Fatalf("after prune: %v", ents)
	}

	// The bound: full, Keep refuses until something is pruned.
	s.max = 1
	if _, err := s.Keep(t.Context(), kv); err == nil {
		t.Fatal("source gone: kept from nothing")
	}
	src3 := makeVersion(t, key, "echo", "0.3.0", "three")
	v3, _ := VerifyDir(src3, anchors, nil)
	src4 := makeVersion(t, key, "echo", "0.4.0", "four")
	v4, _ := VerifyDir(src4, anchors, nil)
	if _, err := s.Keep(t.Context(), v3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Keep(t.Context(), v4); !errors.Is(err, ErrPlacedFull) {
		t.Fatalf("past the bound: %v", err)
	}
	if _, err := s.Keep(t.Context(), v3); err != nil {
		t.Fatalf("keeping a kept one when full: %v", err)
	}
}
