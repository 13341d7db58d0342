package grammar

import "strings"

// The capability vocabulary shared by signed facts (which describe a node),
// package manifests (whose requirements select capabilities) and the
// placement engine (which matches one against the other). Capability ids
// themselves follow ValidCapabilityID.

// Bounds of capability records and requirements.
const (
	// MinCapabilityRecordSegments is the fewest words of the id of a
	// capability record: a family and at least one more ("cpu.cores").
	// A selector may be a single word ("accel").
	MinCapabilityRecordSegments = 2
	// MaxCapabilityAttrs bounds the attributes of one capability record.
	MaxCapabilityAttrs = 64
	// MaxAttrNameLen bounds an attribute name.
	MaxAttrNameLen = 64
)

// TrustFamily is the capability family no node may claim: trust is
// assigned by operators (mesh.peers[].tier), never asserted in facts.
const TrustFamily = "trust"

// Provenance of a capability record, from weakest to strongest evidence.
const (
	ProvenanceClaimed  = "claimed"  // said by configuration (labels)
	ProvenanceProbed   = "probed"   // found by a probe of the node
	ProvenanceMeasured = "measured" // observed in serving traffic
)

// ProvenanceRank orders provenances (claimed 1 < probed 2 < measured 3) and
// reports whether p is one; a requirement's minimum provenance is met by a
// record of equal or higher rank.
func ProvenanceRank(p string) (int, bool) {
	switch p {
	case ProvenanceClaimed:
		return 1, true
	case ProvenanceProbed:
		return 2, true
	case ProvenanceMeasured:
		return 3, true
	default:
		return 0, false
	}
}

// States of a capability record. Busy and reserved capabilities count
// towards a node's load.
const (
	StateAvailable = "available"
	StateBusy      = "busy"
	StateReserved  = "reserved"
	StateDegraded  = "degraded"
)

// ValidCapabilityState reports whether s is a capability state.
func ValidCapabilityState(s string) bool {
	switch s {
	case StateAvailable, StateBusy, StateReserved, StateDegraded:
		return true
	default:
		return false
	}
}

// Predicate operators of a requirement on a capability attribute.
const (
	OpEq  = "eq"  // the attribute equals the value
	OpGte = "gte" // the numeric attribute is at least the value
	OpLte = "lte" // the numeric attribute is at most the value
	OpIn  = "in"  // the attribute equals one of the listed values
	OpHas = "has" // the list attribute contains the value
)

// ValidPredicateOp reports whether op is a predicate operator.
func ValidPredicateOp(op string) bool {
	switch op {
	case OpEq, OpGte, OpLte, OpIn, OpHas:
		return true
	default:
		return false
	}
}

// ValidCapabilityRecordID reports whether id may name a capability record:
// a capability id of at least MinCapabilityRecordSegments words.
func ValidCapabilityRecordID(id string) bool {
	return ValidCapabilityID(id) && strings.Count(id, ".")+1 >= MinCapabilityRecordSegments
}

// CapabilityFamily returns the first word of a capability id ("accel" of
// "accel.gpu.nvidia").
func CapabilityFamily(id string) string {
	family, _, _ := strings.Cut(id, ".")
	return family
}

// SelectorMatches reports whether the requirement selector sel selects the
// capability id: exactly, or as a dot-prefix ("accel.gpu" selects
// "accel.gpu.nvidia.a100" but not "accel.gpux").
func SelectorMatches(sel, id string) bool {
	return id == sel || (len(id) > len(sel) && strings.HasPrefix(id, sel) && id[len(sel)] == '.')
}

// ValidAttrName reports whether s is an attribute name: 1 to
// MaxAttrNameLen bytes of a-z 0-9 _, starting with a-z.
func ValidAttrName(s string) bool {
	if len(s) == 0 || len(s) > MaxAttrNameLen || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}
