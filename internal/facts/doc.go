// Package facts probes what a node is (CPU, OS, memory, GPUs, runtimes on
// PATH, operator labels, measured serving speed) and signs it with the
// node key, so a controller can place work on it without trusting
// anything the node did not sign.
//
// Probe reads the machine through ProbeDeps, so tests give it fakes. The
// decoders of /proc/meminfo, nvidia-smi, rocm-smi, system_profiler,
// sysctl and vm_stat output and of a runtime's --version treat their
// input as untrusted: every size and count is bounded by a constant in
// limits.go and checked before allocating. A GPU tool that is not
// installed is skipped silently; a failed sub-probe (a GPU tool that
// fails, an unreadable /proc file) degrades to a Note in the facts, not
// an error.
//
// # Capabilities
//
// Facts carry capability records (reference 3.3): {id, attrs, provenance,
// state, exclusive}, in the vocabulary of internal/grammar. Probe emits
// cpu.arch.<goarch> {name}, cpu.cores {count}, os.<goos> {name, kernel},
// mem.system {total, free} (mem.unified instead on Apple silicon, where
// CPU and GPU share one memory), one accel.gpu.nvidia[.<model>] {index,
// name, mem_bytes, utilization_pct} and one mem.vram {index, total, free}
// per GPU nvidia-smi reports (busy at GPUBusyPercent utilisation), the
// same as accel.gpu.amd[.<model>] and mem.vram per GPU rocm-smi reports,
// accel.gpu.apple[.<model>] on Apple silicon (with its cores when
// system_profiler reports them), accel.gpu.<vendor>[.<model>] per other
// GPU system_profiler reports on a Mac, runtime.<kind> {name,
// version} per runtime found on PATH (version from "--version" where that
// is cheap, bounded by RuntimeVersionTimeout), all probed, and
// label.<key> {value} per operator label, claimed. A Source adds
// perf.infer.<role> {metric, value, samples} records, measured, from its
// PerfSource (the proxy's time to first byte and tokens per second of
// local instances), and keeps the label records in step with SetLabels.
// With a class (SourceOptions.Class, SetClass: the operator's node.class)
// it adds node.class.<class>, claimed, without attributes.
// Load is the share of busy or reserved records; unknown with none.
//
// Sign and Verify carry facts in a Signed envelope whose signature is
// ed25519 over the domain tag "nodeld.facts.v1\x00" followed by the exact
// payload bytes. Verify checks the bytes as received, then parses them;
// nothing is re-marshalled to verify. Capability records are decoded
// strictly (unknown or repeated keys are errors) and counted as they are
// read: the record past MaxCapabilities and the attribute past
// grammar.MaxCapabilityAttrs are refused before they are decoded. Facts
// signed before capabilities existed still verify.
//
// Invariants:
//   - Facts never carry trust. There is no tier field anywhere, labels
//     named tier or trust (or prefixed "tier." or "trust.") are refused by
//     Probe, Sign and Verify, and so is any capability record in the
//     trust family: tiers come only from the operator.
//   - The node id inside signed facts always equals identity.NodeID of the
//     signing key; Verify refuses anything else.
//   - Label keys a node signs now are one capability word
//     (grammar.ValidLabelKey), so each label is the record label.<key>;
//     Verify still accepts the dotted keys older nodes signed, without a
//     record for them.
//   - A SeqStore never hands out a seq twice, across restarts and crashes:
//     it durably reserves a block of values (temp file, fsync, rename,
//     directory fsync) before handing out any value of the block.
//
// Concurrency: Probe, Sign and Verify are safe for concurrent use. SeqStore
// and Source are safe for concurrent use by many goroutines; a Source
// probes for one caller at a time and reads its PerfSource then. The
// package starts no goroutines of its own; Probe runs nvidia-smi,
// rocm-smi, sysctl, vm_stat and system_profiler (macOS) and runtimes'
// --version as child processes and waits for each (bounded by
// NvidiaSMITimeout, for rocm-smi too, CommandTimeout and
// RuntimeVersionTimeout) before returning.
package facts
