package pkg

import (
	"path/filepath"
	"testing"
)

// A package placed from the package store is kept where it is (the store
// never replaces a version); one from elsewhere is copied into
// <data_dir>/placed.
func TestPlacedStoreKeepsStorePackagesInPlace(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	anchors := Anchors{pubOf(key)}
	pkgDir := makeVersion(t, key, "echo", "0.1.0", "one")
	data := t.TempDir()
	store := NewStore(filepath.Join(data, StoreDir), nil)
	stored, _, err := store.Add(pkgDir, anchors)
	if err != nil {
		t.Fatal(err)
	}
	s := NewPlacedStoreBeside(filepath.Join(data, PlacedDir), store)
	if dir, err := s.Keep(t.Context(), stored); err != nil || dir != stored.Dir {
		t.Fatalf("store package kept in %s (%v), want %s", dir, err, stored.Dir)
	}
	v, err := VerifyDir(pkgDir, anchors, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(data, PlacedDir, v.ManifestHash)
	if dir, err := s.Keep(t.Context(), v); err != nil || dir != want {
		t.Fatalf("operator package kept in %s (%v), want %s", dir, err, want)
	}
}
