package plane

// This file keeps what an operator placement placed (Deps.Placed): the
// package is copied into the controller's placed-package store at place
// time, and a failover or a start reads that copy, placing it only when
// its manifest hash is the one placed.

import (
	"context"
	"errors"
	"fmt"

	"github.com/nodeld/nodeld/internal/pkg"
	"go.uber.org/zap"
)

// ErrPackageChanged is wrapped when the package a placement names is no
// longer the one it placed (another manifest hash at its directory, and
// no kept copy): it is not placed in its stead.
var ErrPackageChanged = errors.New("the package is not the one placed")

// keep copies p into the placed-package store and returns the copy,
// verified again, and o naming it (Order.Kept); release is called once
// the placement made from it is recorded (or none is). Without a store
// it returns p and o as they are.
func (c *keeper) keep(ctx context.Context, p Package, o Order) (Package, Order, func(), error) {
	if c.kept == nil {
		return p, o, func() {}, nil
	}
	v := p.Verified()
	hash := v.ManifestHash
	c.keptMu.Lock()
	c.mu.Lock()
	c.keeping[hash]++
	c.mu.Unlock()
	dir, err := c.kept.Keep(ctx, v)
	if errors.Is(err, pkg.ErrPlacedFull) {
		// Drop what no placement uses any more, then try again.
		c.pruneKeptLocked()
		dir, err = c.kept.Keep(ctx, v)
	}
	c.keptMu.Unlock()
	release := func() {
		c.mu.Lock()
		if c.keeping[hash]--; c.keeping[hash] <= 0 {
			delete(c.keeping, hash)
		}
		c.mu.Unlock()
	}
	if err != nil {
		release()
		return nil, o, nil, fmt.Errorf("keep the package placed: %w", err)
	}
	kp, err := c.disp.VerifyPackage(ctx, dir)
	if err == nil && kp.Verified().ManifestHash != hash {
		err = fmt.Errorf("kept copy %s has manifest %.12s, placed %.12s: %w", dir, kp.Verified().ManifestHash, hash, ErrPackageChanged)
	}
	if err != nil {
		release()
		return nil, o, nil, fmt.Errorf("keep the package placed: %w", err)
	}
	o.Kept = dir
	return kp, o, release, nil
}

// pruneKept drops the kept packages no placement uses (every tick).
func (c *keeper) pruneKept() {
	if c.kept == nil {
		return
	}
	c.keptMu.Lock()
	defer c.keptMu.Unlock()
	c.pruneKeptLocked()
}

// pruneKeptLocked is pruneKept for a caller holding keptMu.
func (c *keeper) pruneKeptLocked() {
	c.mu.Lock()
	used := make(map[string]bool, len(c.keeping)+len(c.placements))
	for h := range c.keeping {
		used[h] = true
	}
	for _, p := range c.placements {
		if p.Order != nil && p.Order.Kept != "" {
			used[p.ManifestHash] = true
		}
	}
	c.mu.Unlock()
	n, err := c.kept.Prune(func(h string) bool { return used[h] })
	if err != nil {
		c.log.Warn("placed packages not pruned", zap.Error(err))
	}
	if n > 0 {
		c.log.Debug("placed packages pruned", zap.Int("removed", n))
	}
}

// placedPackage verifies the package a placement of order o placed
// (manifest hash hash) for a failover, a resumed decision or a start: its
// kept copy, else (none kept, or the copy is gone) the order's directory.
// A package whose manifest hash is not hash is refused (ErrPackageChanged):
// a re-signed or replaced directory never stands in for what was placed.
// A revoked package returns the verification error as it is.
func (c *keeper) placedPackage(ctx context.Context, o *Order, hash string) (Package, error) {
	var errs []error
	for _, dir := range []string{o.Kept, o.PackageDir} {
		if dir == "" {
			continue
		}
		p, err := c.disp.VerifyPackage(ctx, dir)
		if pkg.ErrorCode(err) == pkg.CodeRevoked {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		v := p.Verified()
		if hash != "" && v.ManifestHash != hash {
			errs = append(errs, fmt.Errorf("%s holds %s %s (manifest %.12s), not the package placed (manifest %.12s): %w",
				dir, v.Manifest.ID, v.Manifest.Version, v.ManifestHash, hash, ErrPackageChanged))
			continue
		}
		return p, nil
	}
	if len(errs) == 0 {
		return nil, errors.New("no package directory recorded")
	}
	return nil, errors.Join(errs...)
}
