package plane

// This file is the one place where facts and packages become engine
// inputs: when facts gain capability records and manifests gain
// requirements, only this file changes.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/pkg"
)

// Capability ids derived from today's facts.
const (
	capArchPrefix    = "cpu.arch."
	capOSPrefix      = "os."
	capRuntimePrefix = "runtime."
	capGPUPrefix     = "accel.gpu."
	capLabelPrefix   = "label."
	attrName         = "name"
)

// capabilities derives a node's capability records from its facts: its
// arch, OS, runtimes, GPUs (with their memory) and labels, all probed
// (labels claimed: the operator set them on the node). Records whose id
// would not be a valid capability id are left out.
func capabilities(f facts.Facts) []engine.Capability {
	var caps []engine.Capability
	add := func(id, prov string, attrs ...engine.Attr) {
		if grammar.ValidCapabilityRecordID(id) {
			caps = append(caps, engine.Capability{ID: id, Provenance: prov, Attrs: attrs})
		}
	}
	add(capArchPrefix+f.Arch, grammar.ProvenanceProbed, engine.Attr{Name: attrName, Value: engine.String(f.Arch)})
	add(capOSPrefix+f.OS, grammar.ProvenanceProbed, engine.Attr{Name: attrName, Value: engine.String(f.OS)})
	for _, r := range f.Runtimes {
		add(capRuntimePrefix+r, grammar.ProvenanceProbed)
	}
	for _, g := range f.GPUs {
		add(capGPUPrefix+strconv.Itoa(g.Index), grammar.ProvenanceProbed,
			engine.Attr{Name: engine.AttrMemBytes, Value: engine.Int(int64(min(g.VRAMTotalBytes, 1<<62)))})
	}
	keys := make([]string, 0, len(f.Labels))
	for k := range f.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		add(capLabelPrefix+k, grammar.ProvenanceClaimed, engine.Attr{Name: "value", Value: engine.String(f.Labels[k])})
	}
	return caps
}

// memory is a node's free memory from its facts.
func memory(f facts.Facts) engine.Memory {
	m := engine.Memory{HostFree: f.MemFreeBytes}
	for _, g := range f.GPUs {
		m.VRAMFree = append(m.VRAMFree, g.VRAMFreeBytes)
	}
	return m
}

// requirements turns a variant's requirements into engine requirements.
func requirements(r pkg.Requires) []engine.Requirement {
	var reqs []engine.Requirement
	anyOf := func(sel string, vals []string) {
		if len(vals) == 0 {
			return
		}
		ops := make([]engine.Value, len(vals))
		for i, v := range vals {
			ops[i] = engine.String(v)
		}
		reqs = append(reqs, engine.Requirement{
			Selector:   strings.TrimSuffix(sel, "."),
			Predicates: []engine.Predicate{{Attr: attrName, Op: grammar.OpIn, Value: engine.List(ops...)}},
		})
	}
	anyOf(capArchPrefix, r.Arch)
	anyOf(capOSPrefix, r.OS)
	if r.GPU {
		reqs = append(reqs, engine.Requirement{Selector: strings.TrimSuffix(capGPUPrefix, ".")})
	}
	for _, rt := range r.Runtimes {
		reqs = append(reqs, engine.Requirement{Selector: capRuntimePrefix + rt})
	}
	return reqs
}

// request builds the engine request for a verified package and an order.
func request(v *pkg.Verified, o Order, minTrust engine.Trust) engine.Request {
	m := v.Manifest
	req := engine.Request{
		Kind:          m.Kind,
		Name:          workloadName(m, o),
		MinTrust:      minTrust,
		AllowEmulated: o.AllowEmulated,
		Pin:           o.Pin,
		Prefer:        slices.Clone(o.Prefer),
		Avoid:         slices.Clone(o.Avoid),
		RevocableRefs: []string{m.ID, v.ManifestHash},
	}
	for _, va := range m.Variants {
		req.Variants = append(req.Variants, engine.Variant{
			Name:         va.Name,
			Requirements: requirements(va.Requires),
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
	if _, ok := p.Kinds[kind]; !ok {
		return engine.VerdictDeny, fmt.Sprintf("kind %q is not admitted by the policy (default deny)", kind)
	}
	if slices.Contains(p.DenyNodes, n.target.ID) {
		return engine.VerdictDeny, "node is in policy.deny_nodes"
	}
	if n.facts != nil {
		keys := make([]string, 0, len(p.DenyLabels))
		for k := range p.DenyLabels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v, has := n.facts.facts.Labels[k]
			if want := p.DenyLabels[k]; has && (want == "*" || want == v) {
				return engine.VerdictDeny, fmt.Sprintf("label %s=%s is in policy.deny_labels", k, v)
			}
		}
	}
	return engine.VerdictAllow, ""
}

// engineNode converts what the controller knows of n: the operator's tier
// (never the facts'), liveness, facts expiry, capabilities and memory
// from the cached facts, the instances the controller placed there, the
// pending reservations of decisions not yet reflected in its facts, and
// the gate verdict.
func engineNode(n *nodeState, now time.Time, deadAfter time.Duration, instances []engine.Instance, pending []engine.Resources, verdict engine.Verdict, why string) engine.Node {
	en := engine.Node{
		ID:         n.target.ID,
		Trust:      n.target.Tier,
		Liveness:   n.liveness(now, deadAfter),
		Instances:  instances,
		Pending:    pending,
		Gate:       verdict,
		GateReason: why,
	}
	if n.facts == nil || !now.Before(n.facts.meta.ExpiresAt) {
		en.FactsExpired = true
	}
	if n.facts != nil {
		en.Capabilities = capabilities(n.facts.facts)
		en.Memory = memory(n.facts.facts)
	}
	return en
}
