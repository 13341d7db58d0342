package main

import (
	"path/filepath"
	"testing"

	"github.com/nodeld/nodeld/internal/pkg"
)

// A package placed from the package store is kept where it is (the store
// never replaces a version); one from elsewhere is copied into
// <data_dir>/placed.
func TestPlacedStoreKeepsStorePackagesInPlace(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshEchoPackage(t)
	anchors, err := pkg.ParseAnchors([]string{anchor})
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	store := pkg.NewStore(filepath.Join(data, pkg.StoreDir), nil)
	stored, _, err := store.Add(pkgDir, anchors)
	if err != nil {
		t.Fatal(err)
	}
	s := placedStore{PlacedStore: pkg.NewPlacedStore(filepath.Join(data, pkg.PlacedDir)), store: store.Root()}
	if dir, err := s.Keep(t.Context(), stored); err != nil || dir != stored.Dir {
		t.Fatalf("store package kept in %s (%v), want %s", dir, err, stored.Dir)
	}
	v, err := pkg.VerifyDir(pkgDir, anchors, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(data, pkg.PlacedDir, v.ManifestHash)
	if dir, err := s.Keep(t.Context(), v); err != nil || dir != want {
		t.Fatalf("operator package kept in %s (%v), want %s", dir, err, want)
	}
}
