package facts

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// capabilities builds the capability records of probed facts, in a fixed
// order:
//
//	cpu.arch.<goarch>        {name}                      probed
//	cpu.cores                {count}                     probed
//	os.<goos>                {name, kernel?}             probed
//	mem.system | mem.unified {total, free}               probed, when total is known
//	accel.gpu.nvidia[.<model>] {index, name, mem_bytes, utilization_pct?} per GPU,
//	                         busy at GPUBusyPercent     probed
//	mem.vram                 {index, total, free} per GPU probed
//	accel.gpu.amd[.<model>]  {index, name, mem_bytes, utilization_pct?} per GPU
//	                         rocm-smi reports, busy at GPUBusyPercent  probed
//	mem.vram                 {index, total, free} per AMD GPU          probed
//	accel.gpu.apple[.<model>] {index, name, mem_bytes, cores?}  probed, Apple silicon
//	accel.gpu.<vendor>[.<model>] {index, name, mem_bytes?, cores?} per other GPU
//	                         system_profiler reports (macOS)     probed
//	runtime.<kind>           {name, version?}            probed, per runtime
//	label.<key>              {value}                     claimed, per label
//
// Apple silicon (darwin/arm64) has mem.unified instead of mem.system: its
// CPU and GPU share one memory. A word that is not a capability word
// (an odd GOARCH) leaves its record out.
func capabilities(f *Facts, p *probed) []Capability {
	var caps []Capability
	add := func(id, provenance, state string, attrs map[string]grammar.Value) {
		if grammar.ValidCapabilityRecordID(id) {
			caps = append(caps, Capability{ID: id, Attrs: attrs, Provenance: provenance, State: state})
		}
	}
	probedRecord := func(id string, attrs map[string]grammar.Value) {
		add(id, grammar.ProvenanceProbed, grammar.StateAvailable, attrs)
	}
	str := grammar.StringValue
	num := func(v uint64) grammar.Value { return grammar.IntValue(int64(min(v, math.MaxInt64))) }

	probedRecord(grammar.CapCPUArch+"."+f.Arch, map[string]grammar.Value{grammar.AttrName: str(f.Arch)})
	if f.CPUs > 0 {
		probedRecord(grammar.CapCPUCores, map[string]grammar.Value{grammar.AttrCount: grammar.IntValue(int64(f.CPUs))})
	}
	osAttrs := map[string]grammar.Value{grammar.AttrName: str(f.OS)}
	if f.Kernel != "" {
		osAttrs[grammar.AttrKernel] = str(truncateUTF8(f.Kernel, grammar.MaxValueStringLen))
	}
	probedRecord(grammar.CapOS+"."+f.OS, osAttrs)
	if f.MemTotalBytes > 0 {
		id := grammar.CapMemSystem
		if unifiedMemory(f) {
			id = grammar.CapMemUnified
		}
		probedRecord(id, map[string]grammar.Value{grammar.AttrTotal: num(f.MemTotalBytes), grammar.AttrFree: num(f.MemFreeBytes)})
	}
	for _, g := range f.GPUs {
		attrs := map[string]grammar.Value{
			grammar.AttrIndex:    grammar.IntValue(int64(g.Index)),
			grammar.AttrMemBytes: num(g.VRAMTotalBytes),
		}
		name := g.Name
		if notAvailable(name) {
			name = ""
		}
		if name != "" {
			attrs[grammar.AttrName] = str(truncateUTF8(name, grammar.MaxValueStringLen))
		}
		state := grammar.StateAvailable
		if u, ok := p.gpuUtil[g.Index]; ok {
			attrs[grammar.AttrUtilization] = grammar.IntValue(int64(u))
			if u >= GPUBusyPercent {
				state = grammar.StateBusy
			}
		}
		add(accelID("nvidia", name), grammar.ProvenanceProbed, state, attrs)
		probedRecord(grammar.CapMemVRAM, map[string]grammar.Value{
			grammar.AttrIndex: grammar.IntValue(int64(g.Index)),
			grammar.AttrTotal: num(g.VRAMTotalBytes),
			grammar.AttrFree:  num(g.VRAMFreeBytes),
		})
	}
	for _, g := range p.amd {
		attrs := map[string]grammar.Value{
			grammar.AttrIndex:    grammar.IntValue(int64(g.Index)),
			grammar.AttrMemBytes: num(g.VRAMTotalBytes),
		}
		if g.Name != "" {
			attrs[grammar.AttrName] = str(truncateUTF8(g.Name, grammar.MaxValueStringLen))
		}
		state := grammar.StateAvailable
		if g.util >= 0 {
			attrs[grammar.AttrUtilization] = grammar.IntValue(int64(g.util))
			if g.util >= GPUBusyPercent {
				state = grammar.StateBusy
			}
		}
		add(accelID("amd", g.Name), grammar.ProvenanceProbed, state, attrs)
		probedRecord(grammar.CapMemVRAM, map[string]grammar.Value{
			grammar.AttrIndex: grammar.IntValue(int64(g.Index)),
			grammar.AttrTotal: num(g.VRAMTotalBytes),
			grammar.AttrFree:  num(g.VRAMFreeBytes),
		})
	}
	apple := false
	for i, g := range p.displays {
		if g.vendor == "" {
			continue
		}
		attrs := map[string]grammar.Value{grammar.AttrIndex: grammar.IntValue(int64(i)), grammar.AttrName: str(g.name)}
		switch {
		case g.vendor == "apple" && unifiedMemory(f) && f.MemTotalBytes > 0:
			// The GPU may use the whole unified memory.
			attrs[grammar.AttrMemBytes] = num(f.MemTotalBytes)
		case g.vram > 0:
			attrs[grammar.AttrMemBytes] = num(g.vram)
		}
		if g.cores > 0 {
			attrs[grammar.AttrCores] = grammar.IntValue(int64(g.cores))
		}
		apple = apple || g.vendor == "apple"
		probedRecord(accelID(g.vendor, g.name), attrs)
	}
	if p.appleChip != "" && !apple {
		attrs := map[string]grammar.Value{grammar.AttrIndex: grammar.IntValue(0), grammar.AttrName: str(p.appleChip)}
		if f.MemTotalBytes > 0 {
			// The GPU may use the whole unified memory.
			attrs[grammar.AttrMemBytes] = num(f.MemTotalBytes)
		}
		probedRecord(accelID("apple", p.appleChip), attrs)
	}
	for _, r := range f.Runtimes {
		attrs := map[string]grammar.Value{grammar.AttrName: str(r)}
		if v := p.versions[r]; v != "" {
			attrs[grammar.AttrVersion] = str(v)
		}
		probedRecord(grammar.RuntimeCapabilityID(r), attrs)
	}
	return append(caps, labelRecords(f.Labels)...)
}

// unifiedMemory reports whether the node's CPU and GPU share one memory:
// Apple silicon.
func unifiedMemory(f *Facts) bool { return f.OS == "darwin" && f.Arch == "arm64" }

// accelID is the capability id of a GPU from vendor called name:
// accel.gpu.<vendor>.<model>, or accel.gpu.<vendor> when the name gives
// no model word.
func accelID(vendor, name string) string {
	id := grammar.CapAccelGPU + "." + vendor
	if m := modelWord(vendor, name); m != "" {
		id += "." + m
	}
	return id
}

// modelWord turns a device name into one capability word: lower case,
// the vendor's name dropped from its front, every run of characters other
// than a-z and 0-9 made one '-', no '-' at either end, at most
// MaxModelWordBytes ("NVIDIA GeForce RTX 4090" from vendor nvidia gives
// "geforce-rtx-4090"; "Apple M2 Max" from apple gives "m2-max").
func modelWord(vendor, name string) string {
	s := strings.ToLower(name)
	s = strings.TrimPrefix(strings.TrimSpace(s), vendor)
	var b strings.Builder
	dash := false
	for i := 0; i < len(s) && b.Len() < MaxModelWordBytes; i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteByte(c)
			continue
		}
		dash = true
	}
	return strings.TrimRight(b.String()[:min(b.Len(), MaxModelWordBytes)], "-")
}

// labelRecords returns a label.<key> record with attribute value per
// label, claimed, sorted by key. Keys that are not one capability word
// (dotted keys of older configs) have none.
func labelRecords(labels map[string]string) []Capability {
	var caps []Capability
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !grammar.ValidLabelKey(k) || IsTrustLabel(k) {
			continue
		}
		caps = append(caps, Capability{
			ID:         grammar.CapLabel + "." + k,
			Attrs:      map[string]grammar.Value{grammar.AttrValue: grammar.StringValue(labels[k])},
			Provenance: grammar.ProvenanceClaimed,
			State:      grammar.StateAvailable,
		})
	}
	return caps
}

// classFamily is the capability family of the node class records: a
// Source adds them (SourceOptions.Class, SetClass); Probe emits none.
var classFamily = grammar.CapabilityFamily(grammar.CapNodeClass)

// ValidateClass checks an operator's node class: empty (no class), or one
// capability word (grammar.ValidNodeClass), so that it becomes the
// capability record node.class.<class>.
func ValidateClass(class string) error {
	if class != "" && !grammar.ValidNodeClass(class) {
		return fmt.Errorf("%w: node class %q is not %s", ErrInvalidFacts, clip(class), grammar.NodeClassSyntax)
	}
	return nil
}

// classRecords returns the record node.class.<class>, claimed and
// available, or none when class is empty.
func classRecords(class string) []Capability {
	if class == "" {
		return nil
	}
	return []Capability{{
		ID:         grammar.CapNodeClass + "." + class,
		Provenance: grammar.ProvenanceClaimed,
		State:      grammar.StateAvailable,
	}}
}

// replaceFamily returns caps with every record of family replaced by
// repl, placed where the first one was (at the end when there was none).
// caps is not modified.
func replaceFamily(caps []Capability, family string, repl []Capability) []Capability {
	out := make([]Capability, 0, len(caps)+len(repl))
	placed := false
	for _, c := range caps {
		if grammar.CapabilityFamily(c.ID) != family {
			out = append(out, c)
			continue
		}
		if !placed {
			out = append(out, repl...)
			placed = true
		}
	}
	if !placed {
		out = append(out, repl...)
	}
	return out
}

// InferPerf is one measured metric of the node's local instance of a
// role, as a PerfSource reports it.
type InferPerf struct {
	// Role is the inference role (a grammar Name).
	Role string
	// Metric is grammar.PerfMetricTTFBMillis or
	// grammar.PerfMetricTokensPerSecond.
	Metric string
	// Value is the metric's median over the recent requests measured:
	// finite and not negative.
	Value float64
	// Samples is how many requests it rests on: at least MinPerfSamples.
	Samples int
}

// PerfSource reports the measured serving performance of this node's
// local instances: only roles whose local instance still serves, and
// only metrics resting on at least MinPerfSamples requests. The proxy
// measures it (cmd/nodeld adapts it); facts never import the proxy.
// InferPerf must be cheap and safe for concurrent use.
type PerfSource interface {
	InferPerf() []InferPerf
}

// perfRecords turns measurements into perf.infer.<role> records with
// provenance measured, one per metric, sorted by role then metric.
// Measurements that break InferPerf's rules are left out, and at most
// MaxPerfRecords are kept.
func perfRecords(perf []InferPerf) []Capability {
	perf = slices.Clone(perf)
	slices.SortFunc(perf, func(a, b InferPerf) int {
		if c := strings.Compare(a.Role, b.Role); c != 0 {
			return c
		}
		return strings.Compare(a.Metric, b.Metric)
	})
	var caps []Capability
	for _, m := range perf {
		if len(caps) == MaxPerfRecords {
			break
		}
		id := grammar.CapPerfInfer + "." + m.Role
		switch {
		case !grammar.ValidName(m.Role) || !grammar.ValidCapabilityRecordID(id):
		case m.Metric != grammar.PerfMetricTTFBMillis && m.Metric != grammar.PerfMetricTokensPerSecond:
		case math.IsNaN(m.Value) || math.IsInf(m.Value, 0) || m.Value < 0:
		case m.Samples < MinPerfSamples:
		default:
			caps = append(caps, Capability{
				ID: id,
				Attrs: map[string]grammar.Value{
					grammar.AttrMetric:  grammar.StringValue(m.Metric),
					grammar.AttrValue:   grammar.FloatValue(roundPerf(m.Value)),
					grammar.AttrSamples: grammar.IntValue(int64(m.Samples)),
				},
				Provenance: grammar.ProvenanceMeasured,
				State:      grammar.StateAvailable,
			})
		}
	}
	return caps
}

// roundPerf keeps three decimals: finer digits are noise, and shorter
// numbers keep signed facts small.
func roundPerf(v float64) float64 {
	if r := math.Round(v*1000) / 1000; !math.IsInf(r, 0) {
		return r
	}
	return v
}
