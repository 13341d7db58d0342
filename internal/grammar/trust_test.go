package grammar

import "testing"

func TestTrustTiers(t *testing.T) {
	tiers := TrustTiers()
	if len(tiers) != 3 || tiers[0] != TierDiscovered || tiers[1] != TierPaired || tiers[2] != TierPinned {
		t.Fatalf("TrustTiers() = %q", tiers)
	}
	for i, tier := range tiers {
		if r, ok := TrustTierRank(tier); !ok || r != i+1 {
			t.Errorf("TrustTierRank(%q) = %d, %v; want %d", tier, r, ok, i+1)
		}
	}
	for _, bad := range []string{"", "Pinned", "trusted", "none"} {
		if r, ok := TrustTierRank(bad); ok || r != 0 {
			t.Errorf("TrustTierRank(%q) = %d, %v", bad, r, ok)
		}
	}
	if w := TrustTierWords(); w != "discovered, paired or pinned" {
		t.Errorf("TrustTierWords() = %q", w)
	}
	tiers[0] = "changed"
	if TrustTiers()[0] != TierDiscovered {
		t.Error("TrustTiers shares its array with the caller")
	}
}
