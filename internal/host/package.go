package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

// pkgDir is the name of the instance's package directory under
// PackagesDir.
func (in *instance) pkgDir() string {
	return packageDirName(in.pkgID, in.version, in.manifestHash)
}

// PackagesDir returns <data_dir>/packages.
func PackagesDir(dataDir string) string { return filepath.Join(dataDir, "packages") }

// packageDirName is the name, under PackagesDir, of the directory of a
// package with this manifest: <id>-<version>-<16 hex of manifest hash>.
// Instances of the same manifest (other variants or configs) share it.
func packageDirName(pkgID, version, manifestHash string) string {
	return pkgID + "-" + version + "-" + manifestHash[:16]
}

// store is the host's package directories under PackagesDir: it fetches
// a placed package (or reuses the directory of the same manifest that
// still verifies) and removes a directory once nothing uses it.
type store struct {
	// dataDir is Config.DataDir, which cannot change without a restart.
	dataDir string
	rev     *pkg.Revocations
	// inUse reports whether a listed instance or a place in flight uses
	// a package directory (registry.packageInUse). It is called with mu
	// held: the check and the mark of a removal are one step, so a place
	// marked in flight before a removal begins keeps its directory, and
	// one marked after waits for the removal (awaitRemoval).
	inUse func(name string) bool
	jnl   *journal
	met   *metrics
	log   *zap.Logger

	// mu guards removing. It is never held across I/O.
	mu sync.Mutex
	// removing maps a package directory name being removed to a channel
	// closed once it is gone.
	removing map[string]chan struct{}
}

// release removes the package directory name once nothing uses it: no
// listed instance and no place in flight. A place that begins meanwhile
// waits for the removal (awaitRemoval) and fetches afresh.
func (s *store) release(name string) {
	s.mu.Lock()
	if s.inUse(name) || s.removing[name] != nil {
		s.mu.Unlock()
		return
	}
	done := make(chan struct{})
	s.removing[name] = done
	root := PackagesDir(s.dataDir)
	s.mu.Unlock()

	err := removePackageDir(root, name)

	s.mu.Lock()
	delete(s.removing, name)
	s.mu.Unlock()
	close(done)
	if err != nil {
		s.log.Warn("remove package directory", zap.String("dir", name), zap.Error(err))
	}
}

// awaitRemoval waits until the package directory name is not being
// removed. The caller has marked its place in flight first, so no new
// removal of name can begin.
func (s *store) awaitRemoval(ctx context.Context, name string) error {
	s.mu.Lock()
	done := s.removing[name]
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// obtain returns the verified package directory: the one already on disk
// for this manifest when it still verifies, else a fresh fetch moved
// into place.
func (s *store) obtain(ctx context.Context, decision string, v *pkg.Verified, open ArtifactOpener, anchors pkg.Anchors) (string, *ctl.Refusal) {
	m := v.Manifest
	final := filepath.Join(PackagesDir(s.dataDir), packageDirName(m.ID, m.Version, v.ManifestHash))
	if _, err := os.Stat(final); err == nil {
		if _, err := pkg.VerifyDirContext(ctx, final, anchors, s.rev); err == nil {
			_ = s.jnl.record(KindFetchDone, map[string]any{"decision_id": decision, "package": m.ID, "version": m.Version,
				"bytes": m.TotalSize(), "files": len(m.Files), "cached": true})
			return final, nil
		}
		if err := os.RemoveAll(final); err != nil {
			return "", ctl.NewRefusal(ctl.CodeFetch, "clear a stale package directory: "+err.Error())
		}
	}
	if open == nil {
		return "", ctl.NewRefusal(ctl.CodeFetch, "no artifact source for this call")
	}
	partial := filepath.Join(PackagesDir(s.dataDir), ".partial", decision)
	resumes, err := fetchPackage(ctx, open, decision, v, partial, func(n int) { s.met.fetchBytes.Add(float64(n)) })
	s.met.fetchResumes.Add(float64(resumes))
	if err != nil {
		_ = os.RemoveAll(partial)
		code := ctl.CodeFetch
		var fe *fetchError
		if errors.As(err, &fe) {
			code = fe.code
		}
		return "", ctl.NewRefusal(code, err.Error())
	}
	if err := os.Rename(partial, final); err != nil {
		_ = os.RemoveAll(partial)
		return "", ctl.NewRefusal(ctl.CodeFetch, "move the fetched package into place: "+err.Error())
	}
	_ = atomicfile.SyncDir(PackagesDir(s.dataDir))
	_ = s.jnl.record(KindFetchDone, map[string]any{"decision_id": decision, "package": m.ID, "version": m.Version,
		"bytes": m.TotalSize(), "files": len(m.Files), "resumes": resumes})
	return final, nil
}

// removePackageDir removes the directory name directly under root and
// nothing else: name must be a single path element that is not hidden
// (so .partial stays), the entry must be a directory itself (a symbolic
// link is refused, not followed), and the removal goes through an os.Root,
// which never leaves root. A name that does not exist is already removed.
func removePackageDir(root, name string) error {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return fmt.Errorf("%q is not a package directory name", name)
	}
	r, err := os.OpenRoot(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open packages directory: %w", err)
	}
	defer r.Close()
	st, err := r.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", name, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory (mode %s)", name, st.Mode().Type())
	}
	if err := r.RemoveAll(name); err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}
