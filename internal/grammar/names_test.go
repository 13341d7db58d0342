package grammar

import (
	"regexp"
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"chat", true},
		{"c", true},
		{"9b", true},
		{"gpu-2", true},
		{"qwen2.5-7b_q4", true},
		{"llama.cpp", true},
		{"mlx-lm", true},
		{"x-", true},
		{"a.b.c", true},
		{"n-0123456789abcdef", true},
		{strings.Repeat("a", MaxNameLen), true},

		{strings.Repeat("a", MaxNameLen+1), false},
		{"", false},
		{".", false},
		{"..", false},
		{".chat", false},
		{"chat.", false},
		{"a..b", false},
		{"a._b", false},
		{"-chat", false},
		{"_chat", false},
		// Upper case: config's rule for roles, peers and workloads; the
		// table, runner and proxy copies allowed it.
		{"Chat", false},
		{"Coder-7b", false},
		// '+' and ':' were allowed by the table's and runner's role rule.
		{"q4+k", false},
		{"a:b", false},
		{"a/b", false},
		{"/chat", false},
		{"a b", false},
		{"chät", false},
		{"é", false},
		{"chat\n", false},
		{"chat%2f", false},
	}
	for _, tt := range tests {
		if got := ValidName(tt.give); got != tt.want {
			t.Errorf("ValidName(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestValidNodeName(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"workstation", true},
		{"GPU-Box", true},
		{"DESKTOP-AB12CD", true},
		{"host.example.org", true},
		{"n-0123456789abcdef", true},
		{strings.Repeat("A", MaxNameLen), true},

		{strings.Repeat("A", MaxNameLen+1), false},
		{"", false},
		{"-box", false},
		{"box.", false},
		{"a..b", false},
		{"box 1", false},
		{"box/1", false},
	}
	for _, tt := range tests {
		if got := ValidNodeName(tt.give); got != tt.want {
			t.Errorf("ValidNodeName(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestValidInstanceID(t *testing.T) {
	long := strings.Repeat("p", MaxNameLen) + "-0a1b2c3d-n-0123456789abcdef"
	tests := []struct {
		give string
		want bool
	}{
		{"echo-llm-0a1b2c3d-n-0123456789abcdef", true},
		{long, true},
		{strings.Repeat("a", MaxInstanceIDLen), true},
		{strings.Repeat("a", MaxInstanceIDLen+1), false},
		{"", false},
		{"-x", false},
		{"X1", false},
		{"a/b", false},
	}
	for _, tt := range tests {
		if got := ValidInstanceID(tt.give); got != tt.want {
			t.Errorf("ValidInstanceID(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestValidVersion(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"0.1.0", true},
		{"1.2.0-rc.1+build5", true},
		{"V2", true},
		{"2024_01", true},
		{strings.Repeat("1", MaxVersionLen), true},
		{strings.Repeat("1", MaxVersionLen+1), false},
		{"", false},
		{".1", false},
		{"+1", false},
		{"1 0", false},
		{"1/0", false},
		{"1:0", false},
	}
	for _, tt := range tests {
		if got := ValidVersion(tt.give); got != tt.want {
			t.Errorf("ValidVersion(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestValidCapabilityID(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"cpu.arch.amd64", true},
		{"label.rack", true},
		{"runtime.llamacpp", true},
		{"gpu.vendor.nvidia", true},
		{"os", true},
		{"a.b.c.d.e.f.g.h", true},
		{"x86_64", true},
		{"label." + strings.Repeat("k", MaxNameLen), true},

		{"a.b.c.d.e.f.g.h.i", false}, // MaxCapabilitySegments + 1
		{strings.Repeat("a", MaxCapabilityLen+1), false},
		{"", false},
		{"runtime.llama.cpp.", false},
		{".cpu", false},
		{"cpu..arch", false},
		{"cpu.-arch", false},
		{"Cpu.arch", false},
		{"runtime.mlx+lm", false},
		{"label/rack", false},
	}
	for _, tt := range tests {
		if got := ValidCapabilityID(tt.give); got != tt.want {
			t.Errorf("ValidCapabilityID(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
	for s, want := range map[string]bool{"amd64": true, "llamacpp": true, "x86_64": true, "llama.cpp": false, "": false, "-a": false, "A": false} {
		if got := ValidCapabilitySegment(s); got != want {
			t.Errorf("ValidCapabilitySegment(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestValidEnvName(t *testing.T) {
	for s, want := range map[string]bool{
		"PATH": true, "_x": true, "HF_HOME": true, "a1": true, strings.Repeat("A", MaxEnvNameLen): true,
		"": false, "1A": false, "A-B": false, "A=B": false, "A B": false, "É": false,
		strings.Repeat("A", MaxEnvNameLen+1): false,
	} {
		if got := ValidEnvName(s); got != want {
			t.Errorf("ValidEnvName(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestValidHealthPath(t *testing.T) {
	for s, want := range map[string]bool{
		"/": true, "/health": true, "/v1/models": true, "/%41": true, "/a\\b": true,
		"/" + strings.Repeat("h", MaxHealthPathLen-1): true,
		"": false, "health": false, "/a b": false, "/h?x": false, "/h#f": false, "/\u00e9": false,
		"/h\x7f": false, "/h\n": false, "/h\x00": false, "/" + strings.Repeat("h", MaxHealthPathLen): false,
	} {
		if got := ValidHealthPath(s); got != want {
			t.Errorf("ValidHealthPath(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestValidLabelValue(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, "rack 7": true, "~!": true, strings.Repeat("v", MaxLabelValueLen): true,
		strings.Repeat("v", MaxLabelValueLen+1): false, "a\tb": false, "é": false, "\x7f": false,
	} {
		if got := ValidLabelValue(s); got != want {
			t.Errorf("ValidLabelValue(%q) = %v, want %v", s, got, want)
		}
	}
}

// Every Name, prefixed by a short word, is a capability id as long as the
// bounds allow: the engine builds "label.<key>" from label keys.
func TestNameIsCapabilitySuffix(t *testing.T) {
	for _, name := range []string{"rack", "gpu.vendor", "qwen2.5-7b_q4", "a-b_c"} {
		if !ValidName(name) || !ValidCapabilityID("label."+name) {
			t.Errorf("label.%s is not a capability id", name)
		}
	}
}

// The messages state the bounds the code enforces.
func TestSyntaxStatesBounds(t *testing.T) {
	for _, s := range []string{NameSyntax, NodeNameSyntax, VersionSyntax} {
		if !strings.Contains(s, "64") || MaxNameLen != 64 || MaxVersionLen != 64 {
			t.Errorf("%q does not state the bound", s)
		}
	}
}

// nameRE is an independent statement of the Name rule.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*)*$`)

func FuzzValidName(f *testing.F) {
	for _, s := range []string{"chat", "a.b", "a..b", ".", "Chat", "-x", "x-", "qwen2.5-7b", "label.rack", "a.b.c.d.e.f.g.h.i"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := nameRE.MatchString(s)
		if got := ValidName(s); got != (want && len(s) <= MaxNameLen) {
			t.Fatalf("ValidName(%q) = %v, regexp %v", s, got, want)
		}
		if got := ValidInstanceID(s); got != (want && len(s) <= MaxInstanceIDLen) {
			t.Fatalf("ValidInstanceID(%q) = %v, regexp %v", s, got, want)
		}
		segs := strings.Count(s, ".") + 1
		if got := ValidCapabilityID(s); got != (want && len(s) <= MaxCapabilityLen && segs <= MaxCapabilitySegments) {
			t.Fatalf("ValidCapabilityID(%q) = %v, regexp %v", s, got, want)
		}
		// Only ASCII letters fold: strings.ToLower maps "İ" (U+0130) to
		// "i", which no node name may contain.
		lower := strings.Map(func(r rune) rune {
			if 'A' <= r && r <= 'Z' {
				return r + ('a' - 'A')
			}
			return r
		}, s)
		if got := ValidNodeName(s); got != (nameRE.MatchString(lower) && len(s) <= MaxNameLen) {
			t.Fatalf("ValidNodeName(%q) = %v", s, got)
		}
	})
}
