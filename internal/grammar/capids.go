package grammar

import "strings"

// Well-known capability ids: what a node's facts say about it and what
// manifests and the placement engine look for. An id ending in a word
// that varies ("cpu.arch" + "." + GOARCH) is given without it.
const (
	// CapCPUArch + "." + GOARCH names the CPU architecture
	// ("cpu.arch.amd64"); attribute AttrName holds GOARCH.
	CapCPUArch = "cpu.arch"
	// CapCPUCores counts the usable logical CPUs (AttrCount).
	CapCPUCores = "cpu.cores"
	// CapOS + "." + GOOS names the operating system ("os.linux");
	// attribute AttrName holds GOOS, AttrKernel the kernel release when
	// known.
	CapOS = "os"
	// CapMemSystem is host memory: AttrTotal and AttrFree, in bytes.
	CapMemSystem = "mem.system"
	// CapMemUnified replaces CapMemSystem on a machine whose CPU and GPU
	// share one memory (Apple silicon): one pool for host and accelerator
	// demand. Attributes as CapMemSystem.
	CapMemUnified = "mem.unified"
	// CapMemVRAM is one GPU's own memory, one record per GPU: AttrIndex,
	// AttrTotal and AttrFree, in bytes.
	CapMemVRAM = "mem.vram"
	// CapAccel is the family of accelerators.
	CapAccel = "accel"
	// CapAccelGPU + "." + vendor [+ "." + model] is one GPU
	// ("accel.gpu.nvidia.geforce-rtx-4090", "accel.gpu.amd.radeon-rx-7900-xt"):
	// AttrIndex, AttrMemBytes, AttrName and, when known, AttrUtilization
	// and AttrCores.
	CapAccelGPU = "accel.gpu"
	// CapRuntime + "." + RuntimeCapabilityWord(kind) is a runtime the node
	// can start ("runtime.llamacpp"): AttrName holds the kind's Name,
	// AttrVersion the version when known.
	CapRuntime = "runtime"
	// CapLabel + "." + key is an operator label ("label.rack"): AttrValue
	// holds its value. Label keys are single capability words
	// (ValidLabelKey).
	CapLabel = "label"
	// CapPerfInfer + "." + role is measured serving performance of the
	// node's local instance of the role, one record per metric: AttrMetric
	// (PerfMetricTTFBMillis, PerfMetricTokensPerSecond), AttrValue and
	// AttrSamples.
	CapPerfInfer = "perf.infer"
	// CapNodeClass + "." + class is the operator's node.class ("node.class.dev-mac"),
	// claimed: the placement engine ranks native work on a node of its
	// dev fallback class (a laptop) below every other native node. It has
	// no attributes. Classes are single capability words (ValidNodeClass).
	CapNodeClass = "node.class"
)

// Attribute names of the well-known capabilities.
const (
	AttrName        = "name"
	AttrKernel      = "kernel"
	AttrCount       = "count"
	AttrTotal       = "total"
	AttrFree        = "free"
	AttrIndex       = "index"
	AttrMemBytes    = "mem_bytes"
	AttrUtilization = "utilization_pct"
	AttrVersion     = "version"
	AttrValue       = "value"
	AttrMetric      = "metric"
	AttrSamples     = "samples"
	AttrCores       = "cores"
)

// Measured performance metrics (AttrMetric of CapPerfInfer records) and
// which way is better for a perf target.
const (
	// PerfMetricTTFBMillis is the median time to first byte, in
	// milliseconds, of recent successful requests: lower is better.
	PerfMetricTTFBMillis = "ttfb_ms"
	// PerfMetricTokensPerSecond is the median generation speed of recent
	// successful requests that reported their usage: higher is better.
	PerfMetricTokensPerSecond = "tokens_per_s"

	PerfBetterLower  = "lower"
	PerfBetterHigher = "higher"
)

// Execution of a package variant on a node: natively, or under an
// emulator (placed only when explicitly allowed).
const (
	ExecutionNative   = "native"
	ExecutionEmulated = "emulated"
)

// NodeClassSyntax states ValidNodeClass for error messages.
const NodeClassSyntax = "1 to 64 bytes of a-z 0-9 _ -, starting with a-z or 0-9, without dots (one capability word, such as dev-mac)"

// ValidNodeClass reports whether c may be a node class: one capability word
// (ValidCapabilitySegment) of at most MaxNameLen bytes, so CapNodeClass +
// "." + c is always a capability record id.
func ValidNodeClass(c string) bool {
	return len(c) <= MaxNameLen && ValidCapabilitySegment(c)
}

// LabelKeySyntax states ValidLabelKey for error messages.
const LabelKeySyntax = "1 to 64 bytes of a-z 0-9 _ -, starting with a-z or 0-9, without dots (one capability word)"

// ValidLabelKey reports whether k may be an operator label key: one
// capability word (ValidCapabilitySegment) of at most MaxNameLen bytes, so
// CapLabel + "." + k is always a capability record id.
func ValidLabelKey(k string) bool {
	return len(k) <= MaxNameLen && ValidCapabilitySegment(k)
}

// RuntimeCapabilityWord returns the capability word of the runtime named
// name: the kind's Segment when nodeld knows it, else name without its
// dots and hyphens, which is how every known Segment derives from its
// Name ("llama.cpp" is "llamacpp", "mlx-lm" is "mlxlm"). For a Name the
// result is a capability word.
func RuntimeCapabilityWord(name string) string {
	if k, ok := LookupRuntime(name); ok {
		return k.Segment
	}
	return strings.NewReplacer(".", "", "-", "").Replace(name)
}

// RuntimeCapabilityID returns the capability id of the runtime named
// name: CapRuntime + "." + RuntimeCapabilityWord(name).
func RuntimeCapabilityID(name string) string {
	return CapRuntime + "." + RuntimeCapabilityWord(name)
}
