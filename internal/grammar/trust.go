package grammar

// Trust tiers an operator gives a peer (mesh.peers[].tier), lowest first.
// These three words are spelled here only: config validation, the mesh,
// the engine's trust ranks and the docs all take them from TrustTiers.
const (
	TierDiscovered = "discovered"
	TierPaired     = "paired"
	TierPinned     = "pinned"
)

// trustTiers are the tiers, lowest first; a tier's rank is its index + 1.
var trustTiers = [...]string{TierDiscovered, TierPaired, TierPinned}

// TrustTiers returns the trust tiers, lowest first (a new slice).
func TrustTiers() []string { return append([]string(nil), trustTiers[:]...) }

// TrustTierRank returns tier's rank, 1 for the lowest, and whether it is a
// tier at all (0, false for anything else, the empty string included).
func TrustTierRank(tier string) (int, bool) {
	for i, t := range trustTiers {
		if t == tier {
			return i + 1, true
		}
	}
	return 0, false
}

// TrustTierWords lists the tiers for a message: "discovered, paired or
// pinned".
func TrustTierWords() string {
	words := ""
	for i, t := range trustTiers {
		switch {
		case i == 0:
		case i == len(trustTiers)-1:
			words += " or "
		default:
			words += ", "
		}
		words += t
	}
	return words
}
