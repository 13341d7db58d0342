package pkg

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestCompareVersionsSemverOrder(t *testing.T) {
	// Oldest first: the semver 2.0.0 precedence example, numbers beyond
	// 64 bits, then the build metadata and "v" tie-breaks. Versions that
	// are not semantic sort below all of them.
	ordered := []string{
		"01.0.0", "1.0", "2024_01", "V2", "latest",
		"0.9.9",
		"1.0.0-0.3.7",
		"1.0.0-alpha",
		"1.0.0-alpha.1",
		"1.0.0-alpha.beta",
		"1.0.0-beta",
		"1.0.0-beta.2",
		"1.0.0-beta.11",
		"1.0.0-rc.1",
		"1.0.0",
		"1.0.0+build.1",
		"1.0.0+build.2",
		"v1.0.0",
		"1.2.0",
		"1.10.0",
		"2.0.0",
		"99999999999999999999.0.0",
	}
	for i := range ordered {
		for j := range ordered {
			got := CompareVersions(ordered[i], ordered[j])
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			if got != want {
				t.Errorf("CompareVersions(%q, %q) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
	shuffled := slices.Clone(ordered)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	slices.SortFunc(shuffled, CompareVersions)
	if !slices.Equal(shuffled, ordered) {
		t.Errorf("sorted %v", shuffled)
	}
}

func TestIsSemanticVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"1.2.3": true, "v1.2.3": true, "0.0.0": true, "1.2.3-rc.1+b.5": true, "1.0.0-x-y": true,
		"1.2": false, "1.2.3.4": false, "01.2.3": false, "1.02.3": false, "1.2.3-01": false,
		"1.2.3-": false, "1.2.3+": false, "1.2.3-a..b": false, "1.2.3_1": false, "vv1.2.3": false,
		"": false, "v": false, "1.2.-3": false,
	} {
		if got := IsSemanticVersion(v); got != want {
			t.Errorf("IsSemanticVersion(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestNewestVersion(t *testing.T) {
	tests := []struct {
		give []string
		want string
		ok   bool
	}{
		{[]string{"1.0.0", "1.2.0", "1.10.0", "1.9.9"}, "1.10.0", true},
		// A release beats a newer pre-release.
		{[]string{"1.0.0", "2.0.0-rc.1"}, "1.0.0", true},
		{[]string{"2.0.0-rc.1", "2.0.0-rc.2", "2.0.0-beta"}, "2.0.0-rc.2", true},
		// Versions that are not semantic are never chosen.
		{[]string{"V9", "zzz", "0.1.0"}, "0.1.0", true},
		{[]string{"V9", "zzz"}, "", false},
		{nil, "", false},
	}
	for _, tt := range tests {
		got, ok := NewestVersion(tt.give)
		if got != tt.want || ok != tt.ok {
			t.Errorf("NewestVersion(%v) = %q, %v; want %q, %v", tt.give, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzCompareVersions: versions come from config files and directory
// names. Parsing never panics, and CompareVersions is a total order:
// reflexive only on equal strings, antisymmetric, transitive.
func FuzzCompareVersions(f *testing.F) {
	f.Add("1.0.0", "1.0.0-rc.1", "v1.0.0+b")
	f.Add("1.0.0-alpha.1", "1.0.0-alpha.beta", "01.0.0")
	f.Add("99999999999999999999.0.0", "1.2", "")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		ab, ba := CompareVersions(a, b), CompareVersions(b, a)
		if ab != -ba {
			t.Fatalf("Compare(%q, %q) = %d but Compare(%q, %q) = %d", a, b, ab, b, a, ba)
		}
		if (ab == 0) != (a == b) {
			t.Fatalf("Compare(%q, %q) = %d", a, b, ab)
		}
		if bc := CompareVersions(b, c); ab <= 0 && bc <= 0 && CompareVersions(a, c) > 0 {
			t.Fatalf("not transitive: %q <= %q <= %q but %q > %q", a, b, c, a, c)
		}
		if n, ok := NewestVersion([]string{a, b, c}); ok && !IsSemanticVersion(n) {
			t.Fatalf("newest %q is not semantic", n)
		}
	})
}
