package runtime

import "time"

// Bounds enforced by this package. Every probe response is untrusted bytes
// from a process nodeld does not control, so each read and each decoded list
// is capped before it can grow.
const (
	// maxProbeBodyBytes caps the bytes read from one probe response body.
	// A response that declares or delivers more is an error, not truncated
	// JSON.
	maxProbeBodyBytes = 1 << 20

	// maxProbeHeaderBytes caps the response header of a probe.
	maxProbeHeaderBytes = 64 << 10

	// maxListedModels caps the entries read from a /v1/models or
	// /api/tags list; a longer list is refused while decoding, before the
	// extra entries are allocated.
	maxListedModels = 4096

	// maxModelNameBytes caps a configured or discovered model name. A
	// listed name that is longer (or not printable ASCII) is skipped.
	maxModelNameBytes = 256

	// maxRoleBytes caps a role token (the placement table's rule).
	maxRoleBytes = 64

	// maxAdoptedInstances caps inference.instances, which also bounds the
	// label sets of the per-instance metrics.
	maxAdoptedInstances = 64

	// maxURLBytes caps a configured instance URL.
	maxURLBytes = 256

	// maxConcurrentProbes caps the probes in flight during one round.
	maxConcurrentProbes = 8

	// minProbeInterval is the shortest probe interval accepted, so a
	// misconfiguration cannot turn the loop into a busy one.
	minProbeInterval = 100 * time.Millisecond

	// DefaultProbeInterval is the probe interval when the config gives none.
	DefaultProbeInterval = 5 * time.Second

	// DefaultProbeTimeout bounds one instance's probe (all of its requests)
	// when the config gives none.
	DefaultProbeTimeout = 2 * time.Second
)
