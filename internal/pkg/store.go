package pkg

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/grammar"
)

// StoreDir is the package store's directory in the data dir.
const StoreDir = "store"

// storeListLimit bounds how many ids or versions an error names.
const storeListLimit = 20

// Errors of the package store.
var (
	// ErrStoreConflict: the store holds another package under the same
	// id and version. A package is never replaced in the store; publish
	// the change under a new version.
	ErrStoreConflict = errors.New("the store holds a different package under this id and version")
	// ErrNotInStore: Resolve found no such package or version.
	ErrNotInStore = errors.New("not in the package store")
)

// Store is the controller's package store: signed packages by id and
// version, each in <root>/<id>/<version>/ (root is normally
// <data_dir>/store). Add verifies a package and copies it in; Resolve
// finds a version. A stored package is never replaced. The store starts
// no goroutines and holds no state in memory, so several processes may
// use one directory: each Add builds its copy in a temporary directory
// beside the final one and renames it into place.
type Store struct {
	root string
	rev  *Revocations
}

// NewStore returns the store rooted at root. rev, when not nil, is
// checked by Add (a revoked package is not stored); nil checks none.
func NewStore(root string, rev *Revocations) *Store {
	return &Store{root: root, rev: rev}
}

// Root returns the store's directory.
func (s *Store) Root() string { return s.root }

// Add verifies the package in dir against anchors (a signature by one of
// them, a valid manifest, nothing revoked in the store's list, every
// listed file with its size and SHA-256) and copies it into
// <root>/<id>/<version>/: the verified manifest.json and manifest.sig
// bytes and the listed files only, each file hashed as it is copied, so
// the copy is exactly what was verified even if dir changes meanwhile.
// The copy is written to a temporary directory, fsynced and renamed into
// place, so the store never shows a partial package.
//
// If the store holds the same package (the same manifest bytes) under its
// id and version, Add changes nothing and returns it with added false; a
// different package there is refused with ErrStoreConflict. The returned
// Verified's Dir is the stored copy. Verification errors are *VerifyError.
func (s *Store) Add(dir string, anchors Anchors) (v *Verified, added bool, err error) {
	return s.AddContext(context.Background(), dir, anchors)
}

// AddContext is Add, stopped when ctx ends.
func (s *Store) AddContext(ctx context.Context, dir string, anchors Anchors) (v *Verified, added bool, err error) {
	src, err := os.OpenRoot(dir)
	if err != nil {
		return nil, false, fmt.Errorf("add package %q: %w", dir, err)
	}
	defer src.Close()
	mb, err := readInRoot(src, ManifestFile, MaxManifestBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, verr(CodeBadManifest, "%s is missing", ManifestFile)
	}
	if err != nil {
		return nil, false, err
	}
	sb, err := readInRoot(src, SignatureFile, MaxSigFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, verr(CodeBadSignature, "package is not signed: %s is missing", SignatureFile)
	}
	if err != nil {
		return nil, false, err
	}
	v, err = VerifyBytes(mb, sb, anchors, s.rev)
	if err != nil {
		return nil, false, err
	}
	m := v.Manifest
	pkgDir := filepath.Join(s.root, m.ID)
	dest := filepath.Join(pkgDir, m.Version)
	if same, err := sameStored(dest, v); err != nil || same {
		if err != nil {
			return nil, false, err
		}
		v.Dir = dest
		return v, false, nil
	}
	if err := os.MkdirAll(pkgDir, 0o755); err != nil {
		return nil, false, fmt.Errorf("package store: %w", err)
	}
	tmp, err := os.MkdirTemp(pkgDir, ".add-"+m.Version+"-")
	if err != nil {
		return nil, false, fmt.Errorf("package store: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, false, fmt.Errorf("package store: %w", err)
	}
	if err := copyPackage(ctx, src, tmp, v); err != nil {
		return nil, false, err
	}
	if err := os.Rename(tmp, dest); err != nil {
		// Another Add may have stored it meanwhile.
		if same, serr := sameStored(dest, v); serr == nil && same {
			v.Dir = dest
			return v, false, nil
		} else if serr != nil {
			return nil, false, serr
		}
		return nil, false, fmt.Errorf("package store: %w", err)
	}
	done = true
	if err := atomicfile.SyncDir(pkgDir); err != nil {
		return nil, false, fmt.Errorf("package store: sync %s: %w", pkgDir, err)
	}
	v.Dir = dest
	return v, true, nil
}

// sameStored reports whether dest holds v's package (the same manifest
// bytes); an error when it holds another one (ErrStoreConflict) or cannot
// be read. A missing dest is false.
func sameStored(dest string, v *Verified) (bool, error) {
	fi, err := os.Lstat(dest)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("package store: %w", err)
	}
	m := v.Manifest
	if !fi.IsDir() {
		return false, fmt.Errorf("package store: %s is not a directory: %w", dest, ErrStoreConflict)
	}
	held, err := readBounded(filepath.Join(dest, ManifestFile), MaxManifestBytes)
	if err != nil {
		return false, fmt.Errorf("package store: %s %s is there but unreadable (%v): %w", m.ID, m.Version, err, ErrStoreConflict)
	}
	if !bytes.Equal(held, v.ManifestBytes) {
		return false, fmt.Errorf("%s %s: stored manifest %s, this one %s (publish the change under a new version): %w",
			m.ID, m.Version, ManifestHash(held), v.ManifestHash, ErrStoreConflict)
	}
	return true, nil
}

// copyPackage writes v's manifest, signatures and listed files from src
// into dst, hashing each file as it is copied, and fsyncs everything.
func copyPackage(ctx context.Context, src *os.Root, dst string, v *Verified) error {
	dirs := map[string]bool{dst: true}
	write := func(name string, data []byte) error {
		return writeSynced(filepath.Join(dst, name), 0o644, func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		})
	}
	if err := write(ManifestFile, v.ManifestBytes); err != nil {
		return err
	}
	if err := write(SignatureFile, v.SigBytes); err != nil {
		return err
	}
	buf := make([]byte, hashBufferBytes)
	for _, f := range v.Manifest.Files {
		if err := ctx.Err(); err != nil {
			return err
		}
		target := filepath.Join(dst, filepath.FromSlash(f.Path))
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			dirs[filepath.Join(dst, filepath.FromSlash(d))] = true
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return fmt.Errorf("package store: %w", err)
		}
		if err := copyListed(ctx, src, f, target, buf); err != nil {
			return err
		}
	}
	// Directories deepest first, so each entry is durable before its
	// parent's.
	order := make([]string, 0, len(dirs))
	for d := range dirs {
		order = append(order, d)
	}
	slices.SortFunc(order, func(a, b string) int {
		return strings.Count(b, string(filepath.Separator)) - strings.Count(a, string(filepath.Separator))
	})
	for _, d := range order {
		if err := atomicfile.SyncDir(d); err != nil {
			return fmt.Errorf("package store: sync %s: %w", d, err)
		}
	}
	return nil
}

// copyListed copies listed file f from src to target, refusing a path
// through a symbolic link, a size or a SHA-256 other than listed.
func copyListed(ctx context.Context, src *os.Root, f File, target string, buf []byte) error {
	if err := checkPath(src, f.Path); err != nil {
		return err
	}
	in, err := src.Open(f.Path)
	if err != nil {
		return &VerifyError{Code: CodeFileMissing, Detail: fmt.Sprintf("open %s: %v", f.Path, err), Err: err}
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return &VerifyError{Code: CodeFileMissing, Detail: fmt.Sprintf("stat %s: %v", f.Path, err), Err: err}
	}
	if !st.Mode().IsRegular() {
		return verr(CodeFileMissing, "%s is not a regular file", f.Path)
	}
	if st.Size() != f.Size {
		return verr(CodeFileSize, "%s has %d bytes, manifest says %d", f.Path, st.Size(), f.Size)
	}
	mode := os.FileMode(0o644)
	if f.Exec {
		mode = 0o755
	}
	h := sha256.New()
	var n int64
	err = writeSynced(target, mode, func(w io.Writer) error {
		var err error
		n, err = io.CopyBuffer(io.MultiWriter(w, h), &ctxReader{ctx: ctx, r: io.LimitReader(in, f.Size+1)}, buf)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if n != f.Size {
		return verr(CodeFileSize, "%s changed size while copied: read %d bytes, manifest says %d", f.Path, n, f.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return verr(CodeFileHash, "%s has SHA-256 %s, manifest says %s", f.Path, got, f.SHA256)
	}
	return nil
}

// writeSynced creates name (which must not exist) with mode, fills it
// with fill, and fsyncs and closes it.
func writeSynced(name string, mode os.FileMode, fill func(io.Writer) error) error {
	out, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("package store: %w", err)
	}
	err = fill(out)
	if err == nil {
		err = out.Chmod(mode) // past the umask
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("package store: write %s: %w", name, err)
	}
	return nil
}

// Resolve returns the directory of package id at version, or at its
// newest version when version is "" (NewestVersion: the highest release,
// else the highest pre-release; versions that are not semantic are chosen
// only by name). An unknown id or version, or a store holding no semantic
// version of id when none is named, is an error wrapping ErrNotInStore
// that names what the store holds. Only entries holding a manifest.json
// count; Resolve does not verify the package (placing it does).
func (s *Store) Resolve(id, version string) (dir, resolved string, err error) {
	if !grammar.ValidName(id) {
		return "", "", fmt.Errorf("package store: %q is not a package id", clip(id))
	}
	if version != "" && !grammar.ValidVersion(version) {
		return "", "", fmt.Errorf("package store: %q is not a package version", clip(version))
	}
	versions, err := s.Versions(id)
	if err != nil {
		return "", "", err
	}
	if len(versions) == 0 {
		ids, _ := s.IDs()
		return "", "", fmt.Errorf("package store has no %s (it holds %s): %w", id, nameList(ids, "nothing"), ErrNotInStore)
	}
	switch {
	case version != "":
		if !slices.Contains(versions, version) {
			return "", "", fmt.Errorf("package store has no %s %s (it holds %s): %w", id, version, nameList(versions, ""), ErrNotInStore)
		}
		resolved = version
	default:
		var ok bool
		if resolved, ok = NewestVersion(versions); !ok {
			return "", "", fmt.Errorf("package store holds no semantic version of %s (it holds %s; name one): %w", id, nameList(versions, ""), ErrNotInStore)
		}
	}
	return filepath.Join(s.root, id, resolved), resolved, nil
}

// Versions returns the versions of id in the store, oldest first
// (CompareVersions); none when the store has no id.
func (s *Store) Versions(id string) ([]string, error) {
	if !grammar.ValidName(id) {
		return nil, fmt.Errorf("package store: %q is not a package id", clip(id))
	}
	entries, err := os.ReadDir(filepath.Join(s.root, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("package store: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || !grammar.ValidVersion(e.Name()) {
			continue // a file, a link, an Add in progress (".add-...")
		}
		if fi, err := os.Lstat(filepath.Join(s.root, id, e.Name(), ManifestFile)); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, e.Name())
	}
	slices.SortFunc(out, CompareVersions)
	return out, nil
}

// IDs returns the package ids in the store, sorted.
func (s *Store) IDs() ([]string, error) {
	entries, err := os.ReadDir(s.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("package store: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && grammar.ValidName(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// nameList renders names for an error, at most storeListLimit of them.
func nameList(names []string, none string) string {
	switch {
	case len(names) == 0:
		return none
	case len(names) > storeListLimit:
		return strings.Join(names[:storeListLimit], ", ") + fmt.Sprintf(" and %d more", len(names)-storeListLimit)
	}
	return strings.Join(names, ", ")
}
