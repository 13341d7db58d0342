package table

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

func TestParseLoopbackBase(t *testing.T) {
	tests := []struct {
		give string
		want string // "" = refused
	}{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080"},
		{"http://127.0.0.1:9", "http://127.0.0.1:9"},
		{"http://127.1.2.3:65535", "http://127.1.2.3:65535"},
		{"http://[::1]:8080", "http://[::1]:8080"},
		{"http://[0:0:0:0:0:0:0:1]:8080/", "http://[::1]:8080"},
		{"http://localhost:11434", "http://localhost:11434"},
		{"http://LocalHost:11434", "http://localhost:11434"},

		{"http://10.0.0.1:80", ""},
		{"http://10.0.0.5:8090", ""},
		{"http://0.0.0.0:80", ""},
		{"http://[::]:80", ""},
		{"http://example.com:8090", ""},
		{"http://localhost.evil.example:80", ""},
		{"http://localhost.:80", ""},
		{"http://evil.localhost:80", ""},
		{"https://127.0.0.1:8090", ""},
		{"HTTP://127.0.0.1:8090", ""},
		{"ftp://127.0.0.1:21", ""},
		{"127.0.0.1:8090", ""},
		{"http://127.0.0.1", ""},
		{"http://127.0.0.1:", ""},
		{"http://127.0.0.1:0", ""},
		{"http://127.0.0.1:00080", ""},
		{"http://127.0.0.1:+80", ""},
		{"http://127.0.0.1:65536", ""},
		{"http://127.0.0.1:99999999999999999999", ""},
		{"http://127.0.0.1:8090/v1", ""},
		{"http://127.0.0.1:8090//", ""},
		{"http://127.0.0.1:8090?x=1", ""},
		{"http://127.0.0.1:8090#f", ""},
		{"http://user:pw@127.0.0.1:8090", ""},
		{"http://evil.example@127.0.0.1:8090", ""},
		{"http://127.0.0.1:8090@evil.example:80", ""},
		{"http://127.0.0.01:80", ""},
		{"http://0177.0.0.1:80", ""},
		{"http://2130706433:80", ""},
		{"http://127.0.0.1%2f:80", ""},
		{"http://[::ffff:127.0.0.1]:80", ""},
		{"http://[::1%25lo]:80", ""},
		{"http://[fe80::1%lo]:80", ""},
		{"http://[::1]", ""},
		{"http://[::1]80", ""},
		{"http://[::1:80", ""},
		{"http://::1:80", ""},
		{"http:// 127.0.0.1:80", ""},
		{"http://127.0.0.1:80\r\n", ""},
		{"http://127.0.0.1\\@evil:80", ""},
		{"", ""},
		{"http://" + strings.Repeat("1", MaxBaseURLLen) + ":80", ""},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := ParseLoopbackBase(tt.give)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("ParseLoopbackBase(%q) = %q, want refusal", tt.give, got)
				}
				if !errors.Is(err, ErrNotLoopback) {
					t.Fatalf("error %v does not wrap ErrNotLoopback", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLoopbackBase(%q): %v", tt.give, err)
			}
			if got != tt.want {
				t.Fatalf("ParseLoopbackBase(%q) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

func TestParseLoopbackBaseErrorIsBounded(t *testing.T) {
	_, err := ParseLoopbackBase("http://" + strings.Repeat("a", 10000))
	if err == nil || len(err.Error()) > 2*MaxBaseURLLen {
		t.Fatalf("error %d bytes long, want a bounded message", len(err.Error()))
	}
}

func TestValidRole(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"chat", true},
		{"c", true},
		{"Coder-7b_v1.5+q4:k", true},
		{"9b", true},
		{strings.Repeat("a", MaxRoleLen), true},
		{strings.Repeat("a", MaxRoleLen+1), false},
		{"", false},
		{"a/b", false},
		{"/chat", false},
		{"-chat", false},
		{".chat", false},
		{"chat role", false},
		{"chät", false},
		{"chat\n", false},
		{"chat%2f", false},
		{"..", false},
	}
	for _, tt := range tests {
		if got := ValidRole(tt.give); got != tt.want {
			t.Errorf("ValidRole(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func FuzzParseLoopbackBase(f *testing.F) {
	for _, s := range []string{
		"http://127.0.0.1:8080", "http://127.0.0.1:8080/", "http://[::1]:1", "http://localhost:9",
		"http://10.0.0.1:80", "https://127.0.0.1:1", "http://u@127.0.0.1:1", "http://127.0.0.1:0",
		"http://[::ffff:127.0.0.1]:1", "http://127.0.0.1:1/v1", "http://localhost.evil:1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseLoopbackBase(s)
		if err != nil {
			if got != "" || !errors.Is(err, ErrNotLoopback) {
				t.Fatalf("ParseLoopbackBase(%q) = %q, %v", s, got, err)
			}
			return
		}
		// What is accepted is a plain loopback origin by net/url's reading too.
		u, perr := url.Parse(got)
		if perr != nil {
			t.Fatalf("accepted %q -> %q, which net/url refuses: %v", s, got, perr)
		}
		if u.Scheme != "http" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Port() == "" || u.Port() == "0" {
			t.Fatalf("accepted %q -> %q: not a plain http origin", s, got)
		}
		if h := u.Hostname(); h != "localhost" {
			a, aerr := netip.ParseAddr(h)
			if aerr != nil || !a.IsLoopback() {
				t.Fatalf("accepted %q -> %q: host %q is not loopback", s, got, h)
			}
		}
		// Canonical form is a fixed point.
		for _, again := range []string{got, got + "/"} {
			if g2, err := ParseLoopbackBase(again); err != nil || g2 != got {
				t.Fatalf("ParseLoopbackBase(%q) = %q, %v; want %q", again, g2, err, got)
			}
		}
	})
}
