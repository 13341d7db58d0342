package grammar

// Bounds of the name rules, in bytes unless said otherwise.
const (
	// MaxNameLen bounds a Name and a node name.
	MaxNameLen = 64
	// MaxVersionLen bounds a package version.
	MaxVersionLen = 64
	// MaxInstanceIDLen bounds an instance id: a package id, a hash and a
	// node id joined by '-' fit with room to spare.
	MaxInstanceIDLen = 160
	// MaxLabelValueLen bounds a node label value.
	MaxLabelValueLen = 128
	// MaxCapabilityLen bounds a capability id.
	MaxCapabilityLen = 128
	// MaxCapabilitySegments bounds the dot-separated words of a capability
	// id.
	MaxCapabilitySegments = 8
	// MaxEnvNameLen bounds an environment variable name.
	MaxEnvNameLen = 128
	// MaxHealthPathLen bounds a health check path.
	MaxHealthPathLen = 256
)

// Short statements of the rules, for error messages, so that every package
// describes a rule the same way.
const (
	NameSyntax     = "1 to 64 bytes of a-z 0-9 . _ -, each dot-separated part starting with a-z or 0-9"
	NodeNameSyntax = "1 to 64 bytes of A-Z a-z 0-9 . _ -, each dot-separated part starting with a letter or digit"
	VersionSyntax  = "1 to 64 bytes of A-Z a-z 0-9 . _ + -, starting with a letter or digit"
)

// ValidName reports whether s is a Name: 1 to MaxNameLen bytes of words
// of a-z 0-9 _ -, each starting with a-z or 0-9, joined by single dots.
// Role, peer, workload, package, variant and runtime names and label keys
// are Names.
func ValidName(s string) bool {
	return len(s) <= MaxNameLen && dotted(s, false) > 0
}

// ValidNodeName reports whether s is a node name: a Name whose letters may
// also be upper case, since a node is often named after its host. Node
// names are compared with strings.EqualFold.
func ValidNodeName(s string) bool {
	return len(s) <= MaxNameLen && dotted(s, true) > 0
}

// ValidInstanceID reports whether s may be an instance id: the Name rule
// with the longer bound MaxInstanceIDLen.
func ValidInstanceID(s string) bool {
	return len(s) <= MaxInstanceIDLen && dotted(s, false) > 0
}

// ValidCapabilityID reports whether s is a capability id: 1 to
// MaxCapabilitySegments words of the Name rule joined by single dots, at
// most MaxCapabilityLen bytes ("cpu.arch.amd64", "label.rack").
func ValidCapabilityID(s string) bool {
	if len(s) > MaxCapabilityLen {
		return false
	}
	n := dotted(s, false)
	return n > 0 && n <= MaxCapabilitySegments
}

// ValidCapabilitySegment reports whether s is one word of a capability id:
// a-z 0-9 _ -, starting with a-z or 0-9, at most MaxCapabilityLen bytes.
func ValidCapabilitySegment(s string) bool {
	return len(s) <= MaxCapabilityLen && dotted(s, false) == 1
}

// ValidVersion reports whether s is a package version: 1 to MaxVersionLen
// bytes of A-Z a-z 0-9 . _ + -, starting with a letter or digit
// ("1.2.0-rc.1+build5").
func ValidVersion(s string) bool {
	if len(s) == 0 || len(s) > MaxVersionLen || !isAlnum(s[0], true) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c, true) && c != '.' && c != '_' && c != '+' && c != '-' {
			return false
		}
	}
	return true
}

// ValidEnvName reports whether s may name an environment variable given
// to a process: 1 to MaxEnvNameLen bytes of A-Z a-z 0-9 _, not starting
// with a digit.
func ValidEnvName(s string) bool {
	if len(s) == 0 || len(s) > MaxEnvNameLen || '0' <= s[0] && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c, true) && c != '_' {
			return false
		}
	}
	return true
}

// ValidHealthPath reports whether s may be the path a health check asks
// a loopback server for: "/" and then printable ASCII without space, '?'
// or '#', at most MaxHealthPathLen bytes.
func ValidHealthPath(s string) bool {
	if len(s) == 0 || len(s) > MaxHealthPathLen || s[0] != '/' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '?' || c == '#' {
			return false
		}
	}
	return true
}

// ValidLabelValue reports whether s may be a node label value: at most
// MaxLabelValueLen bytes of printable ASCII (space included); empty is
// allowed.
func ValidLabelValue(s string) bool {
	return len(s) <= MaxLabelValueLen && PrintableASCII(s)
}

// PrintableASCII reports whether every byte of s is printable ASCII, 0x20
// (space) to 0x7e.
func PrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// dotted returns the number of words of s when s is words of a-z 0-9 _ -
// (and A-Z when upper), each starting with a letter or digit, joined by
// single dots; 0 when it is not.
func dotted(s string, upper bool) int {
	if s == "" {
		return 0
	}
	words := 1
	start := true // at the first byte of a word
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isAlnum(c, upper):
		case start:
			return 0 // a word starts with '.', '_', '-' or another byte
		case c == '.':
			words++
			start = true
			continue
		case c == '_' || c == '-':
		default:
			return 0
		}
		start = false
	}
	if start {
		return 0 // trailing dot
	}
	return words
}

func isAlnum(c byte, upper bool) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || upper && 'A' <= c && c <= 'Z'
}
