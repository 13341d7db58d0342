package plane

// This file is the one place where facts and packages become engine
// inputs: capability records and memory pools from facts, requirements,
// routes, co-residency labels and the perf target from manifests.

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/pkg"
)

// Capability ids derived from the facts of nodes that signed them before
// capability records existed.
const (
	capArchPrefix  = grammar.CapCPUArch + "."
	capOSPrefix    = grammar.CapOS + "."
	capGPUPrefix   = grammar.CapAccelGPU + "."
	capLabelPrefix = grammar.CapLabel + "."
)

// capabilities converts a node's capability records one to one. Facts
// signed before capability records existed have none; their records are
// derived from the old fields (legacyCapabilities).
func capabilities(f facts.Facts) []engine.Capability {
	if len(f.Capabilities) == 0 {
		return legacyCapabilities(f)
	}
	caps := make([]engine.Capability, len(f.Capabilities))
	for i, c := range f.Capabilities {
		caps[i] = engine.Capability{
			ID:         c.ID,
			Attrs:      attrs(c.Attrs),
			Provenance: c.Provenance,
			State:      c.State,
			Exclusive:  c.Exclusive,
		}
	}
	return caps
}

// attrs converts a record's attributes, sorted by name: the engine takes
// a slice, and map order must not reach a decision.
func attrs(m map[string]grammar.Value) []engine.Attr {
	if len(m) == 0 {
		return nil
	}
	out := make([]engine.Attr, 0, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		out = append(out, engine.Attr{Name: name, Value: m[name]})
	}
	return out
}

// legacyCapabilities derives the capability records of facts signed
// before capability records existed: their arch, OS, runtimes, GPUs
// (with their memory) and labels, all probed (labels claimed: the
// operator set them on the node). Runtime ids are
// grammar.RuntimeCapabilityID, as manifests' requirements name them.
// Records whose id would not be a valid capability id are left out.
func legacyCapabilities(f facts.Facts) []engine.Capability {
	var caps []engine.Capability
	add := func(id, prov string, attrs ...engine.Attr) {
		if grammar.ValidCapabilityRecordID(id) {
			caps = append(caps, engine.Capability{ID: id, Provenance: prov, Attrs: attrs})
		}
	}
	add(capArchPrefix+f.Arch, grammar.ProvenanceProbed, engine.Attr{Name: grammar.AttrName, Value: grammar.StringValue(f.Arch)})
	add(capOSPrefix+f.OS, grammar.ProvenanceProbed, engine.Attr{Name: grammar.AttrName, Value: grammar.StringValue(f.OS)})
	for _, r := range f.Runtimes {
		add(grammar.RuntimeCapabilityID(r), grammar.ProvenanceProbed)
	}
	for _, g := range f.GPUs {
		add(capGPUPrefix+strconv.Itoa(g.Index), grammar.ProvenanceProbed,
			engine.Attr{Name: engine.AttrMemBytes, Value: grammar.IntValue(int64(min(g.VRAMTotalBytes, math.MaxInt64)))})
	}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		add(capLabelPrefix+k, grammar.ProvenanceClaimed, engine.Attr{Name: grammar.AttrValue, Value: grammar.StringValue(f.Labels[k])})
	}
	return caps
}

// memory is a node's free memory. From capability records: mem.unified
// free is the one pool of a unified-memory node (host and accelerator
// demand both come from it), else mem.system free is HostFree; each
// mem.vram record's free is one GPU's VRAMFree, in record order. A pool
// without its record is zero, so demand on it fails. Facts signed before
// capability records existed give their old fields.
func memory(f facts.Facts) engine.Memory {
	if len(f.Capabilities) == 0 {
		m := engine.Memory{HostFree: f.MemFreeBytes}
		for _, g := range f.GPUs {
			m.VRAMFree = append(m.VRAMFree, g.VRAMFreeBytes)
		}
		return m
	}
	var m engine.Memory
	for _, c := range f.Capabilities {
		switch c.ID {
		case grammar.CapMemUnified:
			m.Unified = true
			m.HostFree = bytesAttr(c, grammar.AttrFree)
		case grammar.CapMemSystem:
			if !m.Unified {
				m.HostFree = bytesAttr(c, grammar.AttrFree)
			}
		case grammar.CapMemVRAM:
			m.VRAMFree = append(m.VRAMFree, bytesAttr(c, grammar.AttrFree))
		}
	}
	if m.Unified {
		m.VRAMFree = nil // the engine ignores it; unified memory has no VRAM of its own
	}
	return m
}

// bytesAttr reads a byte count: a non-negative integer; anything else
// (missing, negative, not an integer) is zero.
func bytesAttr(c facts.Capability, name string) uint64 {
	v, _ := c.Attr(name)
	if i, ok := v.Int(); ok && i > 0 {
		return uint64(i)
	}
	return 0
}

// requirements converts a manifest's requirements (already with their
// defaults: pkg.Variant.EffectiveRequirements,
// pkg.Manifest.CommonRequirements).
func requirements(rs []pkg.Requirement) []engine.Requirement {
	if len(rs) == 0 {
		return nil
	}
	out := make([]engine.Requirement, len(rs))
	for i, r := range rs {
		var preds []engine.Predicate
		for _, p := range r.Predicates {
			preds = append(preds, engine.Predicate{Attr: p.Attr, Op: p.Op, Value: p.Value})
		}
		out[i] = engine.Requirement{
			Selector:      r.Select,
			Predicates:    preds,
			Count:         r.Count,
			Exclusive:     r.Exclusive,
			MinProvenance: r.MinProvenance,
		}
	}
	return out
}

// execution converts a variant's execution; anything but emulated is
// native (Manifest.Validate admits nothing else).
func execution(v pkg.Variant) engine.Execution {
	if v.EffectiveExecution() == grammar.ExecutionEmulated {
		return engine.Emulated
	}
	return engine.Native
}

// perfTarget converts a manifest's perf target; nil stays nil.
func perfTarget(t *pkg.PerfTarget) *engine.PerfTarget {
	if t == nil {
		return nil
	}
	out := &engine.PerfTarget{ID: t.ID, Param: t.Param, ParamValue: t.ParamValue}
	switch t.Better {
	case grammar.PerfBetterLower:
		out.Better = engine.BetterLower
	case grammar.PerfBetterHigher:
		out.Better = engine.BetterHigher
	}
	if t.Budget != nil {
		out.Budget, out.HasBudget = *t.Budget, true
	}
	return out
}

// request builds the engine request for a verified package and an order:
// the manifest's common requirements, its variants with their effective
// requirements, execution and resources, its labels, excludes, perf
// target and stickiness; the order's name, pin and affinity.
func request(v *pkg.Verified, o Order, minTrust engine.Trust) engine.Request {
	m := v.Manifest
	req := engine.Request{
		Kind:          m.Kind,
		Name:          workloadName(m, o),
		Requirements:  requirements(m.CommonRequirements()),
		Labels:        slices.Clone(m.Labels),
		Excludes:      slices.Clone(m.Excludes),
		MinTrust:      minTrust,
		AllowEmulated: o.AllowEmulated,
		Perf:          perfTarget(m.PerfTarget),
		Sticky:        m.Sticky,
		Pin:           o.Pin,
		Prefer:        slices.Clone(o.Prefer),
		Avoid:         slices.Clone(o.Avoid),
		RevocableRefs: []string{m.ID, v.ManifestHash},
	}
	for _, va := range m.Variants {
		req.Variants = append(req.Variants, engine.Variant{
			Name:         va.Name,
			Execution:    execution(va),
			Requirements: requirements(va.EffectiveRequirements()),
			Resources:    engine.Resources{HostBytes: va.Resources.MemBytes, AccelBytes: va.Resources.VRAMBytes},
		})
	}
	return req
}

// workloadName is the order's name, or the package id.
func workloadName(m *pkg.Manifest, o Order) string {
	if o.Name != "" {
		return o.Name
	}
	return m.ID
}

// variantResources is what a variant of m reserves, for pending
// placements.
func variantResources(m *pkg.Manifest, variant string) Reservation {
	va, ok := m.Variant(variant)
	if !ok {
		return Reservation{}
	}
	return Reservation{HostBytes: va.Resources.MemBytes, AccelBytes: va.Resources.VRAMBytes}
}

// gate is governance's verdict for placing a workload of kind on node n
// (default deny).
func gate(p Policy, kind string, n *nodeState) (engine.Verdict, string) {
	if why := kindDenial(p, kind); why != "" {
		return engine.VerdictDeny, why
	}
	if why := n.hostGate(); why != "" {
		return engine.VerdictDeny, why
	}
	if why := policyNodeDenial(p, n); why != "" {
		return engine.VerdictDeny, why
	}
	return engine.VerdictAllow, ""
}

// engineNode converts what the controller knows of n: the operator's tier
// (never the facts'), liveness, facts expiry, its capabilities and memory
// from the cached facts as profile (prepared once per facts: profiles),
// the instances the controller placed there, the pending reservations of
// decisions not yet reflected in its facts, and the gate verdict.
func engineNode(n *nodeState, now time.Time, deadAfter time.Duration, profile *engine.Profile, instances []engine.Instance, pending []engine.Resources, verdict engine.Verdict, why string) engine.Node {
	en := engine.Node{
		ID:         n.target.ID,
		Trust:      n.target.Tier,
		Liveness:   n.liveness(now, deadAfter),
		Profile:    profile,
		Instances:  instances,
		Pending:    pending,
		Gate:       verdict,
		GateReason: why,
	}
	if n.facts == nil || !now.Before(n.facts.meta.ExpiresAt) {
		en.FactsExpired = true
	}
	return en
}
