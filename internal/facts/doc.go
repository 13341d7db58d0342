// Package facts probes what a node is (CPU, OS, memory, GPUs, runtimes on
// PATH, operator labels, measured serving speed), expresses it as
// capability records in the vocabulary of internal/grammar, and signs it
// with the node key, so a controller can place work on it without trusting
// anything the node did not sign. A Source keeps the facts current (labels,
// class, the proxy's measured perf.infer.<role> records); a SeqStore hands
// out their sequence numbers.
//
// # Invariants
//
//   - Facts never carry trust: no tier field, and labels or capability
//     records of the trust family are refused by Probe, Sign and Verify.
//     Tiers come only from the operator.
//   - The node id in signed facts equals identity.NodeID of the signing
//     key. The signature covers the exact payload bytes, verified as
//     received, then decoded strictly and bounded (limits.go).
//   - Every probe's output (/proc, nvidia-smi, rocm-smi, sysctl, vm_stat,
//     system_profiler, --version) is untrusted and bounded; a failed
//     sub-probe degrades to a Note, never an error.
//   - A SeqStore never hands out a seq twice, across crashes: it durably
//     reserves a block before handing out any value of it.
//
// # Concurrency
//
// Probe, Sign and Verify are safe for concurrent use, as are SeqStore and
// Source (a Source probes for one caller at a time). The package starts no
// goroutine; Probe waits for each child process it runs, each bounded by a
// timeout.
//
// The long story (every capability record, the envelope) is
// docs/internals.md "internal/facts".
package facts
