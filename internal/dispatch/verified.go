package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

// VerifiedPackage is a package directory that VerifyPackage checked: a
// key of the given anchors signed its manifest, nothing it names was
// revoked in the given list, every listed file had its listed size and
// SHA-256, and its manifest and signatures fit in a place call. It is an
// immutable value that a controller verifies once and places as often as
// it likes (PlaceDecided); the zero value is no package.
type VerifiedPackage struct {
	v *pkg.Verified
	// rev is the list the package was verified against, checked again
	// by each PlaceDecided; nil checks none.
	rev *pkg.Revocations
}

// Verified returns the package as verified (immutable), nil for the zero
// value.
func (p VerifiedPackage) Verified() *pkg.Verified { return p.v }

// Manifest returns the verified manifest, nil for the zero value.
func (p VerifiedPackage) Manifest() *pkg.Manifest {
	if p.v == nil {
		return nil
	}
	return p.v.Manifest
}

// ManifestHash returns the hash of the verified manifest bytes.
func (p VerifiedPackage) ManifestHash() string {
	if p.v == nil {
		return ""
	}
	return p.v.ManifestHash
}

// Dir returns the package directory.
func (p VerifiedPackage) Dir() string {
	if p.v == nil {
		return ""
	}
	return p.v.Dir
}

// VerifyPackage verifies the package in dir (an absolute path) against
// anchors and rev (nil checks no revocations) and returns it ready to
// place. Signatures and revocations are checked on every call (they are
// cheap, and the anchors or the list may have changed); the files are
// hashed once per manifest hash: a later call for the same manifest in
// the same directory, whose listed files still have the size, mode and
// modification time they had when hashed, reuses that result
// (MaxVerifiedPackages are remembered, the least recently used dropped
// first). A file changed since is hashed again. Whatever this misses, the
// host still hashes every piece it fetches and refuses a file that is not
// the manifest's.
//
// Errors wrap ErrBadPackage, and the *pkg.VerifyError when there is one
// (pkg.ErrorCode: revoked, untrusted_signer, file_hash, ...), or ctx's
// error when it ended the hashing. Calls for the same new package at once
// may each hash it.
func (d *Dispatcher) VerifyPackage(ctx context.Context, dir string, anchors pkg.Anchors, rev *pkg.Revocations) (VerifiedPackage, error) {
	bad := func(err error) (VerifiedPackage, error) {
		return VerifiedPackage{}, fmt.Errorf("package %s: %w: %w", dir, ErrBadPackage, err)
	}
	if !filepath.IsAbs(dir) {
		return VerifiedPackage{}, fmt.Errorf("package directory %q is not absolute: %w", dir, ErrBadPackage)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return bad(err)
	}
	defer root.Close()

	// The cheap path: the signed bytes as they are now, then the files'
	// metadata against what they were when last hashed. Anything it cannot
	// read is left to the full verification, which names the problem.
	var (
		seenHash string
		before   []fileStat
	)
	mb, merr := readTop(root, pkg.ManifestFile, pkg.MaxManifestBytes)
	sb, serr := readTop(root, pkg.SignatureFile, pkg.MaxSigFileBytes)
	if merr == nil && serr == nil {
		v, err := pkg.VerifyBytes(mb, sb, anchors, rev)
		if err != nil {
			return bad(err)
		}
		v.Dir = dir
		if st, err := statListed(root, v.Manifest.Files); err == nil {
			if d.verified.hit(v.ManifestHash, dir, st) {
				return placeable(VerifiedPackage{v: v, rev: rev})
			}
			seenHash, before = v.ManifestHash, st
		}
	}

	v, err := d.hashPackage(ctx, dir, anchors, rev)
	if err != nil {
		return bad(err)
	}
	// Remember the result only for files that did not change while they
	// were hashed: what was stat'ed before is what was hashed.
	if after, err := statListed(root, v.Manifest.Files); err == nil && v.ManifestHash == seenHash && slices.Equal(before, after) {
		d.verified.put(v.ManifestHash, dir, after)
	}
	return placeable(VerifiedPackage{v: v, rev: rev})
}

// placeable refuses a package whose manifest or signatures place cannot
// carry.
func placeable(p VerifiedPackage) (VerifiedPackage, error) {
	v := p.v
	if len(v.ManifestBytes) > ctl.MaxManifestBytes || len(v.SigBytes) > ctl.MaxManifestSigBytes {
		return VerifiedPackage{}, fmt.Errorf("package %s: manifest of %d bytes or signatures of %d bytes exceed what place carries (%d, %d): %w",
			v.Manifest.ID, len(v.ManifestBytes), len(v.SigBytes), ctl.MaxManifestBytes, ctl.MaxManifestSigBytes, ErrBadPackage)
	}
	return p, nil
}

// ownSigners returns the keys the package's own manifest.sig names: the
// operator's place checks only that the package is intact and signed by
// someone, and leaves whom to trust to the host.
func ownSigners(dir string) (pkg.Anchors, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("package directory %q is not absolute: %w", dir, ErrBadPackage)
	}
	sigBytes, err := atomicfile.ReadBounded(filepath.Join(dir, pkg.SignatureFile), pkg.MaxSigFileBytes)
	if err != nil {
		return nil, fmt.Errorf("package %s: %w: %w", dir, ErrBadPackage, err)
	}
	sf, err := pkg.ParseSigFile(sigBytes)
	if err != nil {
		return nil, fmt.Errorf("package %s: %w: %w", dir, ErrBadPackage, err)
	}
	keys := make([]string, 0, len(sf.Signatures))
	for _, s := range sf.Signatures {
		keys = append(keys, s.Key)
	}
	anchors, err := pkg.ParseAnchors(keys)
	if err != nil {
		return nil, fmt.Errorf("package %s: %w: %w", dir, ErrBadPackage, err)
	}
	return anchors, nil
}

// readTop reads a regular file at the top of root, at most limit bytes,
// refusing a symbolic link as pkg.VerifyDir does.
func readTop(root *os.Root, name string, limit int64) ([]byte, error) {
	st, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > limit {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", name, limit)
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, st.Size())
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// fileStat is what VerifyPackage compares to tell a listed file unchanged
// since it was hashed.
type fileStat struct {
	size int64
	mode fs.FileMode
	mod  int64 // modification time, Unix nanoseconds
}

var errNotRegular = errors.New("not a regular file")

// statListed stats every listed file (without following a final symbolic
// link), in manifest order.
func statListed(root *os.Root, files []pkg.File) ([]fileStat, error) {
	out := make([]fileStat, 0, len(files))
	for _, f := range files {
		st, err := root.Lstat(f.Path)
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: %w", f.Path, errNotRegular)
		}
		out = append(out, fileStat{size: st.Size(), mode: st.Mode(), mod: st.ModTime().UnixNano()})
	}
	return out, nil
}

// verifiedCache remembers, per manifest hash, the directory whose files
// were hashed and found to be the manifest's, with their metadata then.
// It holds at most MaxVerifiedPackages entries.
type verifiedCache struct {
	// mu guards entries and tick.
	mu      sync.Mutex
	entries map[string]*verifiedEntry
	// tick orders uses, for dropping the least recently used.
	tick uint64
}

type verifiedEntry struct {
	dir   string
	files []fileStat
	used  uint64
}

func newVerifiedCache() *verifiedCache {
	return &verifiedCache{entries: make(map[string]*verifiedEntry)}
}

// hit reports whether the files of manifestHash were hashed in dir and
// still have the metadata files.
func (c *verifiedCache) hit(manifestHash, dir string, files []fileStat) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[manifestHash]
	if !ok || e.dir != dir || !slices.Equal(e.files, files) {
		return false
	}
	c.tick++
	e.used = c.tick
	return true
}

// put remembers a hashed package, replacing what was known of its
// manifest hash, and drops the least recently used entry beyond the bound.
func (c *verifiedCache) put(manifestHash, dir string, files []fileStat) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	c.entries[manifestHash] = &verifiedEntry{dir: dir, files: files, used: c.tick}
	for len(c.entries) > MaxVerifiedPackages {
		var oldest string
		var least uint64
		for h, e := range c.entries {
			if oldest == "" || e.used < least {
				oldest, least = h, e.used
			}
		}
		delete(c.entries, oldest)
	}
}

// len counts the remembered packages.
func (c *verifiedCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// hashFunc is the full verification, pkg.VerifyDirContext; a test counts
// its calls.
type hashFunc func(ctx context.Context, dir string, anchors pkg.Anchors, rev *pkg.Revocations) (*pkg.Verified, error)

var _ hashFunc = pkg.VerifyDirContext
