package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/runner"
)

// decodeInstanceConfig strictly decodes a place's instance config: at
// most maxInstanceConfigBytes, no unknown fields, no trailing data.
func decodeInstanceConfig(p []byte, c *ctl.InstanceConfig) error {
	if len(p) > maxInstanceConfigBytes {
		return fmt.Errorf("instance config of %d bytes, bound %d", len(p), maxInstanceConfigBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return fmt.Errorf("decode instance config: %w", err)
	}
	// Token, not More: More reports false for a stray '}' or ']'.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the instance config")
	}
	return nil
}

// PackagesDir returns <data_dir>/packages.
func PackagesDir(dataDir string) string { return filepath.Join(dataDir, "packages") }

// packageDirName is the name, under PackagesDir, of the directory of a
// package with this manifest: <id>-<version>-<16 hex of manifest hash>.
// Instances of the same manifest (other variants or configs) share it.
func packageDirName(pkgID, version, manifestHash string) string {
	return pkgID + "-" + version + "-" + manifestHash[:16]
}

// revocationRefusal maps a verification error: a revoked subject is
// governance, anything else verify.
func revocationRefusal(prefix string, err error) *ctl.Refusal {
	if pkg.ErrorCode(err) == pkg.CodeRevoked {
		return ctl.NewRefusal(ctl.CodeGovernance, prefix+err.Error())
	}
	return ctl.NewRefusal(ctl.CodeVerify, prefix+err.Error())
}

// place serves place and load (reference 6.1).
func (h *Host) place(ctx context.Context, req ctl.Request, open ArtifactOpener) (_ any, refusal *ctl.Refusal) {
	cfg := h.config()
	gen := h.rev.Generation()
	p, err := ctl.DecodePlaceParams(req.Body)
	if err != nil {
		return nil, asRefusal(err)
	}
	var icfg ctl.InstanceConfig
	if len(p.Config) > 0 {
		if err := decodeInstanceConfig(p.Config, &icfg); err != nil || icfg.Validate() != nil {
			return nil, ctl.NewRefusal(ctl.CodeInvalidRequest, "instance config: unknown field or bad port")
		}
	}
	// Verify the signed manifest against this node's anchors and
	// revocations before anything is fetched.
	v, err := pkg.VerifyBytes(p.Manifest, p.ManifestSig, cfg.TrustAnchors, h.rev)
	if err != nil {
		return nil, revocationRefusal("", err)
	}
	m := v.Manifest
	if m.ID != p.Package || m.Version != p.Version {
		return nil, ctl.NewRefusal(ctl.CodeVerify, "manifest names another package or version")
	}
	variant, ok := m.Variant(p.Variant)
	if !ok {
		return nil, ctl.NewRefusal(ctl.CodeInvalidRequest, "the manifest has no variant "+p.Variant)
	}
	if r := h.admit(ctx, m, variant, cfg); r != nil {
		return nil, r
	}
	id := ctl.InstanceID(m.ID, m.Version, variant.Name, v.ManifestHash, icfg, h.self.ID())

	// Mark the decision in flight and reserve the id (and so its package
	// directory, which no unload removes while the place runs).
	pkgDir := packageDirName(m.ID, m.Version, v.ManifestHash)
	if r := h.begin(req.DecisionID, id, pkgDir, m); r != nil {
		return nil, r
	}
	defer func() {
		h.end(req.DecisionID, id)
		// A failed place leaves no package directory that nothing uses.
		if refusal != nil {
			h.releasePackage(pkgDir)
		}
	}()
	if err := h.record(KindPlaceBegin, map[string]any{
		"decision_id": req.DecisionID, "method": req.Method, "requester": req.Requester, "instance_id": id,
		"package": m.ID, "version": m.Version, "variant": variant.Name, "manifest_hash": v.ManifestHash,
	}); err != nil {
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "audit chain unavailable")
	}

	// An unload that was removing the directory before this place began
	// finishes first.
	if err := h.awaitRemoval(ctx, pkgDir); err != nil {
		return nil, ctl.NewRefusal(ctl.CodeFetch, "wait for the package directory's removal: "+err.Error())
	}
	dir, r := h.obtain(ctx, req.DecisionID, v, open, cfg)
	if r != nil {
		return nil, r
	}
	// Re-check the finished directory against anchors and revocations.
	dv, err := pkg.VerifyDirContext(ctx, dir, cfg.TrustAnchors, h.rev)
	if err != nil {
		return nil, revocationRefusal("fetched package: ", err)
	}
	if dv.ManifestHash != v.ManifestHash {
		return nil, ctl.NewRefusal(ctl.CodeVerify, "fetched package has another manifest")
	}

	sbx, r := h.isolate(id, dir, runner.Kind(m.Runtime.Type), &variant)
	if r != nil {
		return nil, r
	}
	spec := specOf(m, dir, icfg)
	if spec.Kind == runner.KindOllama {
		h.mu.Lock()
		spec.URL = h.ollamaURL
		h.mu.Unlock()
	}
	mdeps := runner.ManagedDeps{Logger: h.log.Named("runner"), Now: h.now}
	if sbx != nil {
		mdeps.Launcher = &isoLauncher{h: h, sbx: sbx, id: id, decision: req.DecisionID, pkgID: m.ID, version: m.Version}
	}
	managed, err := runner.NewManaged(spec, mdeps)
	if err != nil {
		if sbx != nil {
			_ = sbx.Close()
		}
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "runtime: "+err.Error())
	}
	in := &instance{
		h: h, id: id, decision: req.DecisionID, requester: req.Requester, pkgID: m.ID, version: m.Version,
		variant: variant.Name, role: m.Role, model: m.Runtime.Model, manifestHash: v.ManifestHash,
		kind: runner.Kind(m.Runtime.Type), inference: m.Kind == pkg.KindInference, verified: dv,
		managed: managed, adapter: &supervised{m: managed}, state: ctl.StateLoaded, since: h.now(), sbx: sbx,
	}
	in.opMu.Lock()
	defer in.opMu.Unlock()
	// The instance is listed before the decision leaves the in-flight set
	// (the deferred end), so a listing always shows one of the two.
	h.mu.Lock()
	h.insts[id] = in
	h.departed = slices.DeleteFunc(h.departed, func(d ctl.Departed) bool { return d.InstanceID == id })
	h.mu.Unlock()

	// A revocation that landed while fetching: enforce it on this one.
	if h.rev.Generation() != gen {
		if err := h.rev.CheckVerified(dv); err != nil {
			h.mu.Lock()
			delete(h.insts, id)
			h.mu.Unlock()
			h.releaseIsolation(in)
			return nil, ctl.NewRefusal(ctl.CodeGovernance, "revoked while it was being placed: "+err.Error())
		}
	}

	started := false
	if req.Method == ctl.MethodPlace && p.Start {
		if err := h.startRun(ctx, in); err != nil {
			return nil, h.rollback(ctx, in, err)
		}
		started = true
	}
	if err := h.record(KindPlaceOK, map[string]any{
		"decision_id": req.DecisionID, "method": req.Method, "requester": req.Requester, "instance_id": id,
		"package": m.ID, "version": m.Version, "variant": variant.Name, "runtime": m.Runtime.Type, "started": started,
	}); err != nil {
		h.log.Error("place done but not chained", zap.String("instance", id), zap.Error(err))
	}
	snap := in.snapshot()
	return ctl.PlaceResult{
		InstanceID: id, Runtime: m.Runtime.Type, Variant: variant.Name, Package: m.ID,
		// State and detail only: a place answer decodes on a controller
		// older than since and reason (they are in the status listing).
		Status: ctl.InstanceState{State: snap.state, Detail: snap.detail}, Node: h.self.ID(),
	}, nil
}

// rollback unloads an instance whose start failed. If the unload fails
// too, the instance stays listed (failed) so it can be reconciled.
func (h *Host) rollback(ctx context.Context, in *instance, startErr error) *ctl.Refusal {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ctl.DefaultStopGrace+5*time.Second)
	defer cancel()
	serr := in.managed.Stop(sctx, ctl.DefaultStopGrace)
	if serr == nil && !in.managed.Alive() {
		h.mu.Lock()
		delete(h.insts, in.id)
		h.mu.Unlock()
		h.releaseIsolation(in)
		return ctl.NewRefusal(ctl.CodeRuntime, fmt.Sprintf("start failed: %v; loaded instance %s unloaded", startErr, in.id))
	}
	h.met.failures.WithLabelValues(ctl.ReasonRollback).Inc()
	in.enter(ctl.StateFailed, ctl.ReasonRollback, fmt.Sprintf("start failed (%v) and unload failed (%v)", startErr, serr))
	return ctl.NewRefusal(ctl.CodeRuntime, fmt.Sprintf("start failed: %v; unload of %s failed too (%v), it stays listed", startErr, in.id, serr))
}

// begin marks a decision in flight and reserves its instance id and its
// package directory.
func (h *Host) begin(decision, id, pkgDir string, m *pkg.Manifest) *ctl.Refusal {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.inflight[decision] != nil:
		return ctl.NewRefusal(ctl.CodeInvalidRequest, "decision is already being placed")
	case h.insts[id] != nil:
		return ctl.NewRefusal(ctl.CodeRuntime, "instance "+id+" is already loaded")
	case h.reserved[id] != "":
		return ctl.NewRefusal(ctl.CodeRuntime, "instance "+id+" is being placed by another decision")
	case len(h.insts)+len(h.inflight) >= MaxInstances:
		return ctl.NewRefusal(ctl.CodeAdmission, "too many instances on this node")
	}
	h.inflight[decision] = &inflight{decision: decision, pkgID: m.ID, version: m.Version, instanceID: id, pkgDir: pkgDir, since: h.now()}
	h.reserved[id] = decision
	return nil
}

func (h *Host) end(decision, id string) {
	h.mu.Lock()
	delete(h.inflight, decision)
	delete(h.reserved, id)
	h.mu.Unlock()
}

// admit checks that the node can run the variant: OS and arch, the
// runtime on this node, and memory against the node's free memory.
func (h *Host) admit(ctx context.Context, m *pkg.Manifest, v pkg.Variant, cfg Config) *ctl.Refusal {
	if len(v.Requires.OS) > 0 && !slices.Contains(v.Requires.OS, runtime.GOOS) {
		return ctl.NewRefusal(ctl.CodeAdmission, "variant needs another OS than "+runtime.GOOS)
	}
	if len(v.Requires.Arch) > 0 && !slices.Contains(v.Requires.Arch, runtime.GOARCH) {
		return ctl.NewRefusal(ctl.CodeAdmission, "variant needs another architecture than "+runtime.GOARCH)
	}
	if m.TotalSize() > MaxPackageBytes {
		return ctl.NewRefusal(ctl.CodeAdmission, fmt.Sprintf("package of %d bytes exceeds %d", m.TotalSize(), int64(MaxPackageBytes)))
	}
	if free, ok := freeDisk(cfg.DataDir); ok && uint64(m.TotalSize()) > free {
		return ctl.NewRefusal(ctl.CodeAdmission, fmt.Sprintf("package of %d bytes exceeds the %d bytes of free disk", m.TotalSize(), free))
	}
	if h.facts == nil {
		return nil
	}
	f, err := h.facts.Facts(ctx)
	if err != nil {
		return ctl.NewRefusal(ctl.CodeAdmission, "node facts unavailable: "+err.Error())
	}
	need := append([]string{m.Runtime.Type}, v.Requires.Runtimes...)
	for _, r := range need {
		if !slices.Contains(f.Runtimes, r) {
			return ctl.NewRefusal(ctl.CodeAdmission, "runtime "+r+" is not present on this node")
		}
	}
	if f.MemFreeBytes > 0 && v.Resources.MemBytes > f.MemFreeBytes {
		return ctl.NewRefusal(ctl.CodeAdmission, fmt.Sprintf("variant needs %d bytes of memory, %d free", v.Resources.MemBytes, f.MemFreeBytes))
	}
	return nil
}

// obtain returns the verified package directory: the one already on disk
// for this manifest when it still verifies, else a fresh fetch moved
// into place.
func (h *Host) obtain(ctx context.Context, decision string, v *pkg.Verified, open ArtifactOpener, cfg Config) (string, *ctl.Refusal) {
	m := v.Manifest
	final := filepath.Join(PackagesDir(cfg.DataDir), packageDirName(m.ID, m.Version, v.ManifestHash))
	if _, err := os.Stat(final); err == nil {
		if _, err := pkg.VerifyDirContext(ctx, final, cfg.TrustAnchors, h.rev); err == nil {
			_ = h.record(KindFetchDone, map[string]any{"decision_id": decision, "package": m.ID, "version": m.Version,
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
	partial := filepath.Join(PackagesDir(cfg.DataDir), ".partial", decision)
	resumes, err := fetchPackage(ctx, open, decision, v, partial, func(n int) { h.met.fetchBytes.Add(float64(n)) })
	h.met.fetchResumes.Add(float64(resumes))
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
	// Best effort: the package is in place; a crash before the directory
	// reaches the disk only makes the next place fetch it again.
	_ = atomicfile.SyncDir(PackagesDir(cfg.DataDir))
	_ = h.record(KindFetchDone, map[string]any{"decision_id": decision, "package": m.ID, "version": m.Version,
		"bytes": m.TotalSize(), "files": len(m.Files), "resumes": resumes})
	return final, nil
}

// specOf builds the runtime spec of a package in dir.
func specOf(m *pkg.Manifest, dir string, icfg ctl.InstanceConfig) runner.Spec {
	s := runner.Spec{
		Kind: runner.Kind(m.Runtime.Type), Dir: dir, Command: m.Runtime.Command,
		Args: m.Runtime.Args, Env: m.Runtime.Env, ModelFile: m.Runtime.ModelFile, Model: m.Runtime.Model,
		Port: icfg.Port, LogCap: MaxLogBytes * 4,
	}
	if m.Runtime.Health != nil {
		s.HealthPath = m.Runtime.Health.Path
	}
	if s.Kind == runner.KindOllama {
		s.Port = 0
	}
	return s
}
