package pkg

import (
	"cmp"
	"strings"
)

// semver is a parsed semantic version (semver 2.0.0): MAJOR.MINOR.PATCH,
// an optional pre-release after "-" and optional build metadata after
// "+". Numbers are kept as their digits (no leading zeros), so a number
// of any length compares without overflow.
type semver struct {
	major, minor, patch string
	pre                 []string
}

// parseSemver parses s as a semantic version, with an optional leading
// "v" ("v1.2.3"). ok is false for anything else: a missing part, a
// leading zero, an empty identifier, a character outside
// [0-9A-Za-z-] in an identifier.
func parseSemver(s string) (v semver, ok bool) {
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexByte(s, '+'); i >= 0 {
		for _, id := range strings.Split(s[i+1:], ".") {
			if !validIdent(id) {
				return semver{}, false
			}
		}
		s = s[:i]
	}
	if i := strings.IndexByte(s, '-'); i >= 0 {
		v.pre = strings.Split(s[i+1:], ".")
		for _, id := range v.pre {
			if !validIdent(id) || (allDigits(id) && !validNumber(id)) {
				return semver{}, false
			}
		}
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return semver{}, false
	}
	for _, p := range parts {
		if !validNumber(p) {
			return semver{}, false
		}
	}
	v.major, v.minor, v.patch = parts[0], parts[1], parts[2]
	return v, true
}

// validIdent reports whether id is a non-empty run of [0-9A-Za-z-].
func validIdent(id string) bool {
	if id == "" {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// validNumber reports whether s is a numeric identifier: digits without
// a leading zero (but "0").
func validNumber(s string) bool {
	return allDigits(s) && (s == "0" || s[0] != '0')
}

// cmpNumber compares two numeric identifiers by value.
func cmpNumber(a, b string) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
}

// precedence compares two semantic versions by semver precedence: the
// numbers, then a pre-release below the release, then pre-release
// identifiers one by one (numbers below words, numbers by value, words
// in ASCII order, a shorter list below a longer one it starts).
func (v semver) precedence(w semver) int {
	if c := cmp.Or(cmpNumber(v.major, w.major), cmpNumber(v.minor, w.minor), cmpNumber(v.patch, w.patch)); c != 0 {
		return c
	}
	switch {
	case len(v.pre) == 0 && len(w.pre) == 0:
		return 0
	case len(v.pre) == 0:
		return 1
	case len(w.pre) == 0:
		return -1
	}
	for i := 0; i < len(v.pre) && i < len(w.pre); i++ {
		a, b := v.pre[i], w.pre[i]
		an, bn := allDigits(a), allDigits(b)
		var c int
		switch {
		case an && bn:
			c = cmpNumber(a, b)
		case an:
			c = -1
		case bn:
			c = 1
		default:
			c = strings.Compare(a, b)
		}
		if c != 0 {
			return c
		}
	}
	return cmp.Compare(len(v.pre), len(w.pre))
}

// IsSemanticVersion reports whether version is a semantic version
// (semver 2.0.0, with an optional leading "v").
func IsSemanticVersion(version string) bool {
	_, ok := parseSemver(version)
	return ok
}

// CompareVersions orders package versions, oldest first. Semantic
// versions (IsSemanticVersion) compare by semver precedence; any other
// version sorts below every semantic one. Versions that are equal by
// precedence (they differ in build metadata or a leading "v") and
// versions that are not semantic compare byte-wise, so the order is
// total: the result is 0 only for equal strings.
func CompareVersions(a, b string) int {
	va, oka := parseSemver(a)
	vb, okb := parseSemver(b)
	switch {
	case oka && okb:
		if c := va.precedence(vb); c != 0 {
			return c
		}
	case oka:
		return 1
	case okb:
		return -1
	}
	return strings.Compare(a, b)
}

// NewestVersion returns the newest of versions by semantic version: the
// highest release, or when there is none, the highest pre-release.
// Versions that are not semantic are never chosen; ok is false when no
// version is semantic.
func NewestVersion(versions []string) (newest string, ok bool) {
	var best string
	var bestV semver
	found := false
	for _, s := range versions {
		v, isSem := parseSemver(s)
		if !isSem {
			continue
		}
		switch {
		case !found:
		case len(bestV.pre) == 0 && len(v.pre) > 0:
			continue // a release beats every pre-release
		case len(bestV.pre) > 0 && len(v.pre) == 0:
		case CompareVersions(s, best) <= 0:
			continue
		}
		best, bestV, found = s, v, true
	}
	return best, found
}
