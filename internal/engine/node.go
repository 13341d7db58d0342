package engine

import "github.com/nodeld/nodeld/internal/grammar"

// Node is what the engine knows of one node: a snapshot the caller builds
// from the node's verified facts, its operator-assigned tier, liveness,
// the instances and pending placements the controller knows of, and the
// governance verdict for this workload on it. The engine never reads a
// clock: everything time-dependent (liveness, facts expiry) is decided by
// the caller and given here.
type Node struct {
	// ID is the node id: 1 to MaxTextLen bytes of printable ASCII, unique
	// among the nodes given to Place.
	ID string
	// Trust is the operator-assigned tier.
	Trust Trust
	// Liveness must be Alive.
	Liveness Liveness
	// FactsExpired is true when the facts behind Capabilities and Memory
	// are past their TTL.
	FactsExpired bool
	// Capabilities are the node's capability records (ids should be unique
	// within a node: Candidate.Assigned names them by id).
	Capabilities []Capability
	// Memory is the node's free memory.
	Memory Memory
	// Profile, when set, is Capabilities and Memory prepared by
	// Symbols.Prepare, and Place reads it rather than them: a caller that
	// keeps each node's Profile while its facts do not change pays for
	// preparing them once, not per decision. Either every node given to
	// Place has a Profile, all from one Symbols, or none has.
	Profile *Profile
	// Instances are the workload instances on the node, for co-residency.
	Instances []Instance
	// Pending is memory reserved on the node by decisions not yet
	// reflected in Memory; it is counted against the pools.
	Pending []Resources
	// Gate is the governance verdict for placing this workload here;
	// GateReason says why when it is a denial.
	Gate       Verdict
	GateReason string
}

// Capability is one capability record of a node: the same vocabulary the
// facts carry and requirements select (internal/grammar).
type Capability struct {
	// ID is a capability record id ("accel.gpu.nvidia.0").
	ID string
	// Attrs are the record's attributes.
	Attrs []Attr
	// Provenance is claimed, probed or measured; any other value ranks
	// below claimed and meets no minimum.
	Provenance string
	// State is available, busy, reserved or degraded; empty means
	// available. Busy and reserved capabilities count towards load.
	State string
	// Exclusive capabilities are held by at most one requirement, and a
	// busy one is not usable.
	Exclusive bool
}

// Attr is one named attribute of a capability.
type Attr struct {
	Name  string
	Value grammar.Value
}

// Memory is a node's free memory. A unified-memory node (Apple silicon)
// has one pool, HostFree, from which host and accelerator demand are
// taken together, and VRAMFree is ignored. Otherwise host demand comes
// from HostFree and accelerator demand from the sum of VRAMFree (one entry
// per GPU). Missing figures are zero: any non-zero demand then fails.
type Memory struct {
	Unified  bool
	HostFree uint64
	VRAMFree []uint64
}

// Instance is a workload instance on a node, for co-residency: it
// conflicts with the request when it carries a label the request excludes
// or excludes a label the request carries. The request's own instance
// (same Kind and Name) is not a neighbour.
type Instance struct {
	Kind     string
	Name     string
	Labels   []string
	Excludes []string
}

// Cluster is what the controller knows beyond single nodes: the revoked
// node ids and revoked refs (package ids, signer keys, artifact hashes).
type Cluster struct {
	RevokedNodes []string
	RevokedRefs  []string
}

// Liveness is the caller's view of whether a node answers.
type Liveness uint8

// Liveness states. Only Alive passes; the zero value is LivenessUnknown.
const (
	LivenessUnknown Liveness = iota
	Alive
	Suspect
	Dead
)

// String returns "unknown", "alive", "suspect" or "dead".
func (l Liveness) String() string {
	switch l {
	case LivenessUnknown:
		return "unknown"
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	default:
		return "invalid"
	}
}

// Verdict is the governance gate's answer for one node. The zero value,
// VerdictNone, rejects the node: the engine fails closed when the caller
// asked no gate.
type Verdict uint8

// Gate verdicts.
const (
	VerdictNone Verdict = iota
	VerdictAllow
	VerdictDeny
)

// String returns "none", "allow" or "deny".
func (v Verdict) String() string {
	switch v {
	case VerdictNone:
		return "none"
	case VerdictAllow:
		return "allow"
	case VerdictDeny:
		return "deny"
	default:
		return "invalid"
	}
}
