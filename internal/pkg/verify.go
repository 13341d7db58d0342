package pkg

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// hashBufferBytes is the read size while hashing files.
const hashBufferBytes = 256 << 10

// Verified is a package that passed VerifyDir. It is immutable.
type Verified struct {
	// Manifest is parsed from ManifestBytes.
	Manifest *Manifest
	// ManifestBytes and SigBytes are the files exactly as verified; a
	// host that serves the package serves these.
	ManifestBytes, SigBytes []byte
	// ManifestHash is ManifestHash(ManifestBytes).
	ManifestHash string
	// Signer is the trust anchor whose signature was accepted.
	Signer ed25519.PublicKey
	// Signers are all keys whose signatures verify, anchors or not; each
	// is a revocation subject.
	Signers []ed25519.PublicKey
	// Dir is the package directory.
	Dir string
}

// VerifyBytes checks a manifest and its signature file as received,
// before any file is fetched: a trust anchor signed manifestBytes, the
// manifest is valid, and nothing it names is revoked in rev (package id,
// every key with a valid signature, manifest hash, listed file hashes).
// The result's Dir is empty; the files are not checked. A host fetching a
// package calls it on the manifest first, then checks each fetched file
// against its File entry, then VerifyDir on the result.
func VerifyBytes(manifestBytes, sigBytes []byte, anchors Anchors, rev *Revocations) (*Verified, error) {
	m, signers, err := verifyManifest(manifestBytes, sigBytes, anchors)
	if err != nil {
		return nil, err
	}
	v := &Verified{
		Manifest:      m,
		ManifestBytes: manifestBytes,
		SigBytes:      sigBytes,
		ManifestHash:  ManifestHash(manifestBytes),
		Signer:        signers.anchor,
		Signers:       signers.all,
	}
	if rev != nil {
		if err := rev.CheckVerified(v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// VerifyDir is VerifyDirContext without cancellation.
func VerifyDir(dir string, anchors Anchors, rev *Revocations) (*Verified, error) {
	return VerifyDirContext(context.Background(), dir, anchors, rev)
}

// VerifyDirContext verifies the package in dir: manifest.sig holds a
// signature by one of anchors over manifest.json as it is on disk; the
// manifest is valid; nothing it names is revoked in rev (package id, any
// key that signed, the manifest hash, any file hash); and every listed
// file is a regular file inside dir, reached through no symbolic link,
// with the listed size and SHA-256. Files are hashed streaming, never
// loaded whole; the cheap checks run before any file is hashed. A nil rev
// checks no revocations (only tools without a data dir pass nil).
//
// Errors are *VerifyError, except when ctx ends or dir cannot be opened.
// Files present in dir but not listed are ignored: whoever runs the
// package must use only listed files (the host fetches exactly those).
func VerifyDirContext(ctx context.Context, dir string, anchors Anchors, rev *Revocations) (*Verified, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("verify package %q: %w", dir, err)
	}
	defer root.Close()

	manifestBytes, err := readInRoot(root, ManifestFile, MaxManifestBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, verr(CodeBadManifest, "%s is missing", ManifestFile)
	}
	if err != nil {
		return nil, err
	}
	sigBytes, err := readInRoot(root, SignatureFile, MaxSigFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, verr(CodeBadSignature, "package is not signed: %s is missing", SignatureFile)
	}
	if err != nil {
		return nil, err
	}
	v, err := VerifyBytes(manifestBytes, sigBytes, anchors, rev)
	if err != nil {
		return nil, err
	}
	v.Dir = dir
	buf := make([]byte, hashBufferBytes)
	for _, f := range v.Manifest.Files {
		if err := verifyFile(ctx, root, f, buf); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// readInRoot reads a regular file at the top of root, bounded. Errors
// other than a missing file are *VerifyError.
func readInRoot(root *os.Root, name string, limit int64) ([]byte, error) {
	st, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, &VerifyError{Code: CodeFileMissing, Detail: fmt.Sprintf("stat %s: %v", name, err), Err: err}
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return nil, verr(CodePathEscape, "%s is a symbolic link", name)
	}
	if !st.Mode().IsRegular() {
		return nil, verr(CodeFileMissing, "%s is not a regular file", name)
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, &VerifyError{Code: CodeFileMissing, Detail: fmt.Sprintf("open %s: %v", name, err), Err: err}
	}
	defer f.Close()
	data, err := readOpenBounded(f, name, limit)
	if err != nil {
		if _, ok := errors.AsType[*VerifyError](err); ok {
			return nil, err
		}
		return nil, &VerifyError{Code: CodeFileMissing, Detail: fmt.Sprintf("read %s: %v", name, err), Err: err}
	}
	return data, nil
}

// checkPath refuses a listed path any of whose components is a symbolic
// link, and reports a missing one. os.Root already refuses to leave the
// directory; refusing every link also keeps a package from depending on
// what its links point to.
func checkPath(root *os.Root, p string) error {
	for i := 0; ; {
		j := strings.IndexByte(p[i:], '/')
		prefix, last := p, true
		if j >= 0 {
			prefix, last = p[:i+j], false
		}
		st, err := root.Lstat(prefix)
		if errors.Is(err, fs.ErrNotExist) {
			return verr(CodeFileMissing, "%s is missing", p)
		}
		if err != nil {
			return &VerifyError{Code: CodePathEscape, Detail: fmt.Sprintf("stat %s: %v", prefix, err), Err: err}
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return verr(CodePathEscape, "%s: %s is a symbolic link", p, prefix)
		}
		if last {
			if !st.Mode().IsRegular() {
				return verr(CodeFileMissing, "%s is not a regular file", p)
			}
			return nil
		}
		if !st.IsDir() {
			return verr(CodeFileMissing, "%s: %s is not a directory", p, prefix)
		}
		i += j + 1
	}
}

func verifyFile(ctx context.Context, root *os.Root, f File, buf []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkPath(root, f.Path); err != nil {
		return err
	}
	file, err := root.Open(f.Path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &VerifyError{Code: CodeFileMissing, Detail: f.Path + " is missing", Err: err}
		}
		return &VerifyError{Code: CodePathEscape, Detail: fmt.Sprintf("open %s: %v", f.Path, err), Err: err}
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return &VerifyError{Code: CodeFileMissing, Detail: fmt.Sprintf("stat %s: %v", f.Path, err), Err: err}
	}
	if !st.Mode().IsRegular() {
		return verr(CodeFileMissing, "%s is not a regular file", f.Path)
	}
	if st.Size() != f.Size {
		return verr(CodeFileSize, "%s has %d bytes, manifest says %d", f.Path, st.Size(), f.Size)
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, &ctxReader{ctx: ctx, r: io.LimitReader(file, f.Size+1)}, buf)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &VerifyError{Code: CodeFileMissing, Detail: fmt.Sprintf("read %s: %v", f.Path, err), Err: err}
	}
	if n != f.Size {
		return verr(CodeFileSize, "%s changed size while hashed: read %d bytes, manifest says %d", f.Path, n, f.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return verr(CodeFileHash, "%s has SHA-256 %s, manifest says %s", f.Path, got, f.SHA256)
	}
	return nil
}

// ctxReader stops a long hash when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
