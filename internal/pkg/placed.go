package pkg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nodeld/nodeld/internal/atomicfile"
)

// PlacedDir is the placed-package store's directory in the data dir.
const PlacedDir = "placed"

// MaxPlaced bounds the packages a PlacedStore keeps at once.
const MaxPlaced = 256

// ErrPlacedFull: the placed-package store keeps MaxPlaced packages that
// placements still use.
var ErrPlacedFull = errors.New("the placed-package store is full")

// keepTempPrefix names a copy in progress; Prune removes those a crash
// left.
const keepTempPrefix = ".keep-"

// PlacedStore keeps the packages the controller placed, each in
// <root>/<manifest hash>/ (root is normally <data_dir>/placed), so that a
// placement fails over with exactly the bytes it placed whatever becomes
// of the directory the operator placed it from. Keep copies a verified
// package in; Prune drops what no placement uses. A kept package is never
// changed: one manifest hash names one manifest. It is safe for
// concurrent use within one process and starts no goroutines.
type PlacedStore struct {
	root string
	max  int
	// store, when set, is the package store's root: a package verified
	// from there is kept where it is (NewPlacedStoreBeside).
	store string
	// mu serialises Keep and Prune, so a copy in progress is never
	// pruned and the bound is kept.
	mu sync.Mutex
}

// NewPlacedStore returns the placed-package store rooted at root,
// keeping at most MaxPlaced packages.
func NewPlacedStore(root string) *PlacedStore {
	return &PlacedStore{root: root, max: MaxPlaced}
}

// NewPlacedStoreBeside is NewPlacedStore for a controller that also
// places from store (ctl place PACKAGE-ID): a package read from store is
// kept as it is rather than copied, since the store never replaces a
// version (a model's weights are not stored twice).
func NewPlacedStoreBeside(root string, store *Store) *PlacedStore {
	s := NewPlacedStore(root)
	s.store = store.Root()
	return s
}

// Root returns the store's directory.
func (s *PlacedStore) Root() string { return s.root }

// Dir is the directory a package of manifest hash hash is kept in.
func (s *PlacedStore) Dir(hash string) string { return filepath.Join(s.root, hash) }

// validKeptName reports whether name is a manifest hash (64 lower-case
// hex digits).
func validKeptName(name string) bool {
	if len(name) != 64 {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Keep copies the package v verified (read from v.Dir: its manifest and
// signature bytes as verified and its listed files, each hashed as it is
// copied and refused if it differs from the manifest) into
// <root>/<v.ManifestHash>, through a temporary directory fsynced and
// renamed into place, and returns that directory. A package kept already
// is not copied again; a directory there whose manifest is not v's (a
// damaged copy) is replaced. When the store keeps MaxPlaced packages it
// refuses with ErrPlacedFull (Prune first). A package read from the
// package store beside it (NewPlacedStoreBeside) is kept where it is.
func (s *PlacedStore) Keep(ctx context.Context, v *Verified) (string, error) {
	if !validKeptName(v.ManifestHash) || ManifestHash(v.ManifestBytes) != v.ManifestHash {
		return "", fmt.Errorf("keep placed package: manifest hash %q does not match its manifest", clip(v.ManifestHash))
	}
	if rel, err := filepath.Rel(s.store, v.Dir); s.store != "" && err == nil && filepath.IsLocal(rel) {
		return v.Dir, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	dest := s.Dir(v.ManifestHash)
	held, err := readBounded(filepath.Join(dest, ManifestFile), MaxManifestBytes)
	switch {
	case err == nil && bytes.Equal(held, v.ManifestBytes):
		return dest, nil
	case err == nil || !errors.Is(err, fs.ErrNotExist):
		// Damaged (another manifest, unreadable): copied again below.
		if err := os.RemoveAll(dest); err != nil {
			return "", fmt.Errorf("placed-package store: %w", err)
		}
	}
	n, err := s.countLocked()
	if err != nil {
		return "", err
	}
	if n >= s.max {
		return "", fmt.Errorf("%w (%d packages): none can be pruned while placements use them", ErrPlacedFull, n)
	}
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return "", fmt.Errorf("placed-package store: %w", err)
	}
	src, err := os.OpenRoot(v.Dir)
	if err != nil {
		return "", fmt.Errorf("keep placed package %q: %w", v.Dir, err)
	}
	defer src.Close()
	tmp, err := os.MkdirTemp(s.root, keepTempPrefix)
	if err != nil {
		return "", fmt.Errorf("placed-package store: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("placed-package store: %w", err)
	}
	if err := copyPackage(ctx, src, tmp, v); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dest); err != nil {
		return "", fmt.Errorf("placed-package store: %w", err)
	}
	done = true
	if err := atomicfile.SyncDir(s.root); err != nil {
		return "", fmt.Errorf("placed-package store: sync %s: %w", s.root, err)
	}
	return dest, nil
}

// countLocked counts the kept packages. The caller holds mu.
func (s *PlacedStore) countLocked() (int, error) {
	entries, err := os.ReadDir(s.root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("placed-package store: %w", err)
	}
	n := 0
	for _, e := range entries {
		if e.IsDir() && validKeptName(e.Name()) {
			n++
		}
	}
	return n, nil
}

// Prune removes every kept package whose manifest hash used does not
// report in use, and the copies a crash left half made. It returns how
// many packages it removed.
func (s *PlacedStore) Prune(used func(hash string) bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	entries, err := os.ReadDir(s.root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("placed-package store: %w", err)
	}
	removed := 0
	var errs []error
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, keepTempPrefix):
		case validKeptName(name) && !used(name):
			removed++
		default:
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.root, name)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("placed-package store: %w", errors.Join(errs...))
	}
	return removed, nil
}
