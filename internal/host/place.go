package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"go.uber.org/zap"

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

// revocationRefusal maps a verification error: a revoked subject is
// governance, anything else verify.
func revocationRefusal(prefix string, err error) *ctl.Refusal {
	if pkg.ErrorCode(err) == pkg.CodeRevoked {
		return ctl.NewRefusal(ctl.CodeGovernance, prefix+err.Error())
	}
	return ctl.NewRefusal(ctl.CodeVerify, prefix+err.Error())
}

// place serves place and load (reference 6.1).
func (l *lifecycle) place(ctx context.Context, req ctl.Request, open ArtifactOpener) (_ any, refusal *ctl.Refusal) {
	cfg := l.config()
	gen := l.rev.Generation()
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
	v, err := pkg.VerifyBytes(p.Manifest, p.ManifestSig, cfg.TrustAnchors, l.rev)
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
	if r := l.admit(ctx, m, variant, cfg); r != nil {
		return nil, r
	}
	id := ctl.InstanceID(m.ID, m.Version, variant.Name, v.ManifestHash, icfg, l.self.ID())

	// Mark the decision in flight and reserve the id (and so its package
	// directory, which no unload removes while the place runs).
	pkgDir := packageDirName(m.ID, m.Version, v.ManifestHash)
	if r := l.reg.begin(req.DecisionID, id, pkgDir, m); r != nil {
		return nil, r
	}
	defer func() {
		l.reg.end(req.DecisionID, id)
		// A failed place leaves no package directory that nothing uses.
		if refusal != nil {
			l.store.release(pkgDir)
		}
	}()
	begin := map[string]any{
		"decision_id": req.DecisionID, "method": req.Method, "requester": req.Requester, "instance_id": id,
		"package": m.ID, "version": m.Version, "variant": variant.Name, "manifest_hash": v.ManifestHash,
	}
	if req.Term != 0 {
		// The term that authorised the place, beside the decision.
		begin["term"] = req.Term
	}
	if err := l.jnl.record(KindPlaceBegin, begin); err != nil {
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "audit chain unavailable")
	}

	// An unload that was removing the directory before this place began
	// finishes first.
	if err := l.store.awaitRemoval(ctx, pkgDir); err != nil {
		return nil, ctl.NewRefusal(ctl.CodeFetch, "wait for the package directory's removal: "+err.Error())
	}
	dir, r := l.store.obtain(ctx, req.DecisionID, v, open, cfg.TrustAnchors)
	if r != nil {
		return nil, r
	}
	// Re-check the finished directory against anchors and revocations.
	dv, err := pkg.VerifyDirContext(ctx, dir, cfg.TrustAnchors, l.rev)
	if err != nil {
		return nil, revocationRefusal("fetched package: ", err)
	}
	if dv.ManifestHash != v.ManifestHash {
		return nil, ctl.NewRefusal(ctl.CodeVerify, "fetched package has another manifest")
	}

	sbx, r := l.iso.prepare(id, dir, runner.Kind(m.Runtime.Type), &variant)
	if r != nil {
		return nil, r
	}
	spec := specOf(m, dir, icfg)
	if spec.Kind == runner.KindOllama {
		l.mu.Lock()
		spec.URL = l.ollamaURL
		l.mu.Unlock()
	}
	mdeps := runner.ManagedDeps{Logger: l.log.Named("runner"), Now: l.now}
	if sbx != nil {
		mdeps.Launcher = &isoLauncher{iso: l.iso, sbx: sbx, id: id, decision: req.DecisionID, pkgID: m.ID, version: m.Version}
	}
	managed, err := runner.NewManaged(spec, mdeps)
	if err != nil {
		if sbx != nil {
			_ = sbx.Close()
		}
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "runtime: "+err.Error())
	}
	in := &instance{
		now: l.now, id: id, decision: req.DecisionID, requester: req.Requester, pkgID: m.ID, version: m.Version,
		variant: variant.Name, role: m.Role, model: m.Runtime.Model, manifestHash: v.ManifestHash,
		kind: runner.Kind(m.Runtime.Type), inference: m.Kind == pkg.KindInference, verified: dv,
		managed: managed, adapter: &supervised{m: managed}, state: ctl.StateLoaded, since: l.now(), sbx: sbx,
	}
	in.opMu.Lock()
	defer in.opMu.Unlock()
	// The instance is listed before the decision leaves the in-flight set
	// (the deferred end), so a listing always shows one of the two.
	l.reg.add(in)

	// A revocation that landed while fetching: enforce it on this one.
	if l.rev.Generation() != gen {
		if err := l.rev.CheckVerified(dv); err != nil {
			l.reg.drop(id)
			l.iso.release(in)
			return nil, ctl.NewRefusal(ctl.CodeGovernance, "revoked while it was being placed: "+err.Error())
		}
	}

	started := false
	if req.Method == ctl.MethodPlace && p.Start {
		if err := l.sup.startRun(ctx, in); err != nil {
			return nil, l.rollback(ctx, in, err)
		}
		started = true
	}
	if err := l.jnl.record(KindPlaceOK, map[string]any{
		"decision_id": req.DecisionID, "method": req.Method, "requester": req.Requester, "instance_id": id,
		"package": m.ID, "version": m.Version, "variant": variant.Name, "runtime": m.Runtime.Type, "started": started,
	}); err != nil {
		l.log.Error("place done but not chained", zap.String("instance", id), zap.Error(err))
	}
	snap := in.snapshot()
	return ctl.PlaceResult{
		InstanceID: id, Runtime: m.Runtime.Type, Variant: variant.Name, Package: m.ID,
		// State and detail only: a place answer decodes on a controller
		// older than since and reason (they are in the status listing).
		Status: ctl.InstanceState{State: snap.state, Detail: snap.detail}, Node: l.self.ID(),
	}, nil
}

// rollback unloads an instance whose start failed. If the unload fails
// too, the instance stays listed (failed) so it can be reconciled.
func (l *lifecycle) rollback(ctx context.Context, in *instance, startErr error) *ctl.Refusal {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ctl.DefaultStopGrace+5*time.Second)
	defer cancel()
	serr := in.managed.Stop(sctx, ctl.DefaultStopGrace)
	if serr == nil && !in.managed.Alive() {
		l.reg.drop(in.id)
		l.iso.release(in)
		return ctl.NewRefusal(ctl.CodeRuntime, fmt.Sprintf("start failed: %v; loaded instance %s unloaded", startErr, in.id))
	}
	l.met.failures.WithLabelValues(ctl.ReasonRollback).Inc()
	in.enter(ctl.StateFailed, ctl.ReasonRollback, fmt.Sprintf("start failed (%v) and unload failed (%v)", startErr, serr))
	return ctl.NewRefusal(ctl.CodeRuntime, fmt.Sprintf("start failed: %v; unload of %s failed too (%v), it stays listed", startErr, in.id, serr))
}

// admit checks that the node can run the variant: OS and arch, the
// runtime on this node, and memory against the node's free memory.
func (l *lifecycle) admit(ctx context.Context, m *pkg.Manifest, v pkg.Variant, cfg Config) *ctl.Refusal {
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
	if l.facts == nil {
		return nil
	}
	f, err := l.facts.Facts(ctx)
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
