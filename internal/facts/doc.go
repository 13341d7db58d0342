// Package facts probes what a node is (CPU, OS, memory, GPUs, runtimes on
// PATH, operator labels) and signs it with the node key, so a controller
// can place work on it without trusting anything the node did not sign.
//
// Probe reads the machine through ProbeDeps, so tests give it fakes. The
// decoders of /proc/meminfo and nvidia-smi output treat their input as
// untrusted: every size and count is bounded by a constant in limits.go and
// checked before allocating. A failed sub-probe (no nvidia-smi, an
// unreadable /proc file) degrades to a Note in the facts, not an error.
//
// Sign and Verify carry facts in a Signed envelope whose signature is
// ed25519 over the domain tag "nodeld.facts.v1\x00" followed by the exact
// payload bytes. Verify checks the bytes as received, then parses them;
// nothing is re-marshalled to verify.
//
// Invariants:
//   - Facts never carry trust. There is no tier field anywhere, and labels
//     named tier or trust (or prefixed "tier." or "trust.") are refused by
//     Probe, Sign and Verify: tiers come only from the operator.
//   - The node id inside signed facts always equals identity.NodeID of the
//     signing key; Verify refuses anything else.
//   - A SeqStore never hands out a seq twice, across restarts and crashes:
//     it durably reserves a block of values (temp file, fsync, rename,
//     directory fsync) before handing out any value of the block.
//
// Concurrency: Probe, Sign and Verify are safe for concurrent use. SeqStore
// and Source are safe for concurrent use by many goroutines. The package
// starts no goroutines of its own; Probe runs nvidia-smi as a child process
// and waits for it (bounded by NvidiaSMITimeout) before returning.
package facts
