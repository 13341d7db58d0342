package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"go.uber.org/zap"
)

// pkgDir is the name of the instance's package directory under
// PackagesDir.
func (in *instance) pkgDir() string {
	return packageDirName(in.pkgID, in.version, in.manifestHash)
}

// packageInUseLocked reports whether a listed instance or a place in
// flight uses the package directory name. The caller holds h.mu.
func (h *Host) packageInUseLocked(name string) bool {
	for _, in := range h.insts {
		if in.pkgDir() == name {
			return true
		}
	}
	for _, f := range h.inflight {
		if f.pkgDir == name {
			return true
		}
	}
	return false
}

// releasePackage removes the package directory name once nothing uses
// it: no listed instance and no place in flight. A place that begins
// meanwhile waits for the removal (awaitRemoval) and fetches afresh.
func (h *Host) releasePackage(name string) {
	h.mu.Lock()
	if h.packageInUseLocked(name) || h.removing[name] != nil {
		h.mu.Unlock()
		return
	}
	done := make(chan struct{})
	h.removing[name] = done
	root := PackagesDir(h.cfg.DataDir)
	h.mu.Unlock()

	err := removePackageDir(root, name)

	h.mu.Lock()
	delete(h.removing, name)
	h.mu.Unlock()
	close(done)
	if err != nil {
		h.log.Warn("remove package directory", zap.String("dir", name), zap.Error(err))
	}
}

// awaitRemoval waits until the package directory name is not being
// removed. The caller has marked its place in flight first, so no new
// removal of name can begin.
func (h *Host) awaitRemoval(ctx context.Context, name string) error {
	h.mu.Lock()
	done := h.removing[name]
	h.mu.Unlock()
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
