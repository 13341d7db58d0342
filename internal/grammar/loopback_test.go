package grammar

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

func TestIsLoopbackHost(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"localhost", true},
		{"LocalHost", true},
		{"127.0.0.1", true},
		{"127.255.0.9", true},
		{"::1", true},
		{"0:0:0:0:0:0:0:1", true},
		{"::ffff:127.0.0.1", true}, // IPv4-mapped: the table refused it, the rest accepted it
		{"::ffff:7f00:1", true},

		{"::ffff:10.0.0.1", false},
		{"::127.0.0.1", false}, // IPv4-compatible, not mapped: not loopback
		{"[::1]", false},
		{"::1%lo", false},
		{"fe80::1%lo", false},
		{"127.0.0.01", false},
		{"0177.0.0.1", false},
		{"2130706433", false},
		{"0.0.0.0", false},
		{"::", false},
		{"10.0.0.2", false},
		{"localhost.", false},
		{"localhost.evil.example", false},
		{"evil.localhost", false},
		{"127.0.0.1:80", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsLoopbackHost(tt.give); got != tt.want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestIsLoopbackAuthority(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"127.0.0.1:8090", true},
		{"localhost", true},
		{"LocalHost:1", true},
		{"LOCALHOST:1", true},
		{"[::1]:8090", true},
		{"[::1]", true},
		{"127.0.0.1", true},
		{"127.255.0.9:65535", true},
		{"[::ffff:127.0.0.1]:80", true},

		{"[::ffff:10.0.0.1]:80", false},
		{"evil.example", false},
		{"10.0.0.2:8090", false},
		{"localhost.evil.example", false},
		{"localhost.", false},
		{"0.0.0.0:80", false},
		{"127.0.0.1:80.evil.example", false},
		{"127.0.0.1:", false},
		{"127.0.0.1:0", false},
		{"127.0.0.1:080", false},
		{"127.0.0.1:+80", false},
		{"127.0.0.1:65536", false},
		{"127.0.0.1:99999", false}, // the proxy's guard took any 1 to 5 digits
		{"127.0.0.1:123456", false},
		{"::1", false},
		{"[::1", false},
		{"[::1]x", false},
		{"[::1]:", false},
		{"[127.0.0.1]:80", false},
		{"[fe80::1%25eth0]:80", false},
		{"[::1%lo]:80", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsLoopbackAuthority(tt.give); got != tt.want {
			t.Errorf("IsLoopbackAuthority(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestIsLoopbackOrigin(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"http://localhost:3000", true},
		{"http://127.0.0.1", true},
		{"http://[::1]:8080", true},
		{"https://localhost", false},
		{"http://evil.example", false},
		{"null", false},
		{"", false},
		{"http://localhost/x", false},
		{"http://localhost/", false},
		{"HTTP://localhost", false},
		{"http://user@localhost", false},
	}
	for _, tt := range tests {
		if got := IsLoopbackOrigin(tt.give); got != tt.want {
			t.Errorf("IsLoopbackOrigin(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestParseLoopbackAddrPort(t *testing.T) {
	tests := []struct {
		give string
		want string // "" = refused
	}{
		{"127.0.0.1:8090", "127.0.0.1:8090"},
		{"127.1.2.3:1", "127.1.2.3:1"},
		{"[::1]:80", "[::1]:80"},
		{"[::1]:0", "[::1]:0"},
		{"127.0.0.1:0", "127.0.0.1:0"},
		{"[::ffff:127.0.0.1]:5", "127.0.0.1:5"},
		{"127.0.0.1:65535", "127.0.0.1:65535"},

		// Names are refused for listening: config and the admin server
		// took localhost, the proxy refused it.
		{"localhost:9", ""},
		{"LocalHost:9", ""},
		{"0.0.0.0:8090", ""},
		{"[::]:8090", ""},
		{":8090", ""},
		{"10.0.0.1:1", ""},
		{"myhost:1", ""},
		{"[fe80::1%lo]:1", ""},
		{"[::1%lo]:1", ""},
		{"127.0.0.1", ""},
		{"[::1]", ""},
		{"::1:80", ""},
		{"127.0.0.1:", ""},
		{"127.0.0.1:65536", ""},
		{"127.0.0.1:-1", ""},
		{"127.0.0.1:+1", ""},
		{"127.0.0.1:08090", ""},
		{"127.0.0.1:http", ""},
		{"8096", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, err := ParseLoopbackAddrPort(tt.give)
		if tt.want == "" {
			if err == nil || !errors.Is(err, ErrNotLoopback) {
				t.Errorf("ParseLoopbackAddrPort(%q) = %v, %v; want ErrNotLoopback", tt.give, got, err)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("ParseLoopbackAddrPort(%q) = %v, %v; want %s", tt.give, got, err, tt.want)
		}
	}
}

func TestParseLoopbackURL(t *testing.T) {
	tests := []struct {
		give string
		want string // the canonical base; "" = refused
	}{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080"},
		{"http://127.0.0.1:9", "http://127.0.0.1:9"},
		{"http://127.1.2.3:65535", "http://127.1.2.3:65535"},
		{"http://[::1]:8080", "http://[::1]:8080"},
		{"http://[0:0:0:0:0:0:0:1]:8080/", "http://[::1]:8080"},
		// localhost is dialled as 127.0.0.1: the table kept the name and
		// the proxy then refused to forward to it.
		{"http://localhost:11434", "http://127.0.0.1:11434"},
		{"http://LocalHost:8081", "http://127.0.0.1:8081"},
		// IPv4-mapped loopback: the runner took it, the table refused it.
		{"http://[::ffff:127.0.0.1]:80", "http://127.0.0.1:80"},
		{"http://[::ffff:7f00:1]:5", "http://127.0.0.1:5"},

		// A path: config took it, the runner and the table refused it.
		{"http://[::1]:8080/v1", ""},
		{"http://127.0.0.1:8090/v1", ""},
		{"http://127.0.0.1:8090//", ""},
		{"http://10.0.0.1:80", ""},
		{"http://10.0.0.5:8090", ""},
		{"http://192.168.1.2:11434", ""},
		{"http://0.0.0.0:80", ""},
		{"http://[::]:80", ""},
		{"http://[::ffff:10.0.0.1]:80", ""},
		{"http://example.com:8090", ""},
		{"http://localhost.evil.example:80", ""},
		{"http://localhost.example.com:8090", ""},
		{"http://localhost.:80", ""},
		{"http://evil.localhost:80", ""},
		{"https://127.0.0.1:8090", ""},
		{"HTTP://127.0.0.1:8090", ""},
		{"ftp://127.0.0.1:21", ""},
		{"http:127.0.0.1:8080", ""},
		{"127.0.0.1:8090", ""},
		{"http://127.0.0.1", ""},
		{"http://localhost", ""},
		{"http://[::1]", ""},
		{"http://127.0.0.1:", ""},
		{"http://127.0.0.1:0", ""},
		{"http://127.0.0.1:00080", ""}, // config and the runner took it
		{"http://127.0.0.1:+80", ""},
		{"http://127.0.0.1:65536", ""},
		{"http://127.0.0.1:99999", ""},
		{"http://127.0.0.1:99999999999999999999", ""},
		{"http://127.0.0.1:8090?x=1", ""},
		{"http://127.0.0.1:8080/?", ""},
		{"http://127.0.0.1:8090#f", ""},
		{"http://127.0.0.1:8090/#frag", ""},
		{"http://user:pw@127.0.0.1:8090", ""},
		{"http://u@127.0.0.1:8080", ""},
		{"http://evil.example@127.0.0.1:8090", ""},
		{"http://127.0.0.1:8090@evil.example:80", ""},
		{"http://127.0.0.01:80", ""},
		{"http://0177.0.0.1:80", ""},
		{"http://2130706433:80", ""},
		{"http://127.0.0.1%2f:80", ""},
		{"http://[::1%25lo]:80", ""},
		{"http://[fe80::1%lo]:80", ""},
		{"http://[::1]80", ""},
		{"http://[::1:80", ""},
		{"http://::1:80", ""},
		{"http://[127.0.0.1]:80", ""},
		{"http:// 127.0.0.1:80", ""},
		{"http://127.0.0.1:80\r\n", ""},
		{"http://127.0.0.1\\@evil:80", ""},
		{"", ""},
		{"http://" + strings.Repeat("1", MaxLoopbackURLLen) + ":80", ""},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := ParseLoopbackURL(tt.give)
			if tt.want == "" {
				if err == nil || !errors.Is(err, ErrNotLoopback) {
					t.Fatalf("ParseLoopbackURL(%q) = %v, %v; want ErrNotLoopback", tt.give, got, err)
				}
				if strings.Contains(err.Error(), tt.give) && tt.give != "" {
					t.Fatalf("error %q repeats the input", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLoopbackURL(%q): %v", tt.give, err)
			}
			if base := "http://" + got.String(); base != tt.want {
				t.Fatalf("ParseLoopbackURL(%q) = %s, want %s", tt.give, base, tt.want)
			}
		})
	}
}

// The reasons the parsers give: callers show them to operators.
func TestLoopbackReasons(t *testing.T) {
	tests := []struct {
		give func() error
		want string
	}{
		{func() error { _, err := ParseLoopbackURL("https://127.0.0.1:1"); return err }, "must start with http://"},
		{func() error { _, err := ParseLoopbackURL("http://127.0.0.1"); return err }, "must name a port"},
		{func() error { _, err := ParseLoopbackURL("http://127.0.0.1:0"); return err }, "port must be 1 to 65535, in decimal without sign or leading zero"},
		{func() error { _, err := ParseLoopbackURL("http://10.0.0.1:1"); return err }, "host is not a loopback address: use 127.0.0.1, [::1] or localhost"},
		{func() error { _, err := ParseLoopbackURL(strings.Repeat("x", MaxLoopbackURLLen+1)); return err }, "longer than 128 bytes (MaxLoopbackURLLen)"},
		{func() error { _, err := ParseLoopbackAddrPort("localhost:1"); return err }, "host is not a loopback IP address: use 127.0.0.1 or [::1]"},
		{func() error { _, err := ParseLoopbackAddrPort("8096"); return err }, "not host:port"},
	}
	for _, tt := range tests {
		if err := tt.give(); err == nil || err.Error() != tt.want || !errors.Is(err, ErrNotLoopback) {
			t.Errorf("got %v, want %q matching ErrNotLoopback", err, tt.want)
		}
	}
	if MaxLoopbackURLLen != 128 {
		t.Error("the too-long reason states a stale bound")
	}
}

func FuzzParseLoopbackURL(f *testing.F) {
	for _, s := range []string{
		"http://127.0.0.1:8080", "http://127.0.0.1:8080/", "http://[::1]:1", "http://localhost:9",
		"http://10.0.0.1:80", "https://127.0.0.1:1", "http://u@127.0.0.1:1", "http://127.0.0.1:0",
		"http://[::ffff:127.0.0.1]:1", "http://[::ffff:7f00:1]:5", "http://127.0.0.1:1/v1",
		"http://localhost.evil:1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ap, err := ParseLoopbackURL(s)
		if err != nil {
			if ap.IsValid() || !errors.Is(err, ErrNotLoopback) {
				t.Fatalf("ParseLoopbackURL(%q) = %v, %v", s, ap, err)
			}
			return
		}
		// Independently of this parser, net/url reads what was accepted as
		// a plain http origin on a loopback host.
		u, perr := url.Parse(s)
		if perr != nil {
			t.Fatalf("accepted %q, which net/url refuses: %v", s, perr)
		}
		if u.Scheme != "http" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Port() == "" {
			t.Fatalf("accepted %q: not a plain http origin", s)
		}
		if h := strings.ToLower(u.Hostname()); h != "localhost" {
			a, aerr := netip.ParseAddr(h)
			if aerr != nil || a.Zone() != "" || !a.Unmap().IsLoopback() {
				t.Fatalf("accepted %q: host %q is not loopback", s, h)
			}
		}
		// The result is an unmapped loopback IP with a port, and its base
		// is a fixed point.
		if !ap.Addr().IsLoopback() || ap.Addr().Is4In6() || ap.Port() == 0 {
			t.Fatalf("accepted %q as %v", s, ap)
		}
		base := "http://" + ap.String()
		for _, again := range []string{base, base + "/"} {
			if ap2, err := ParseLoopbackURL(again); err != nil || ap2 != ap {
				t.Fatalf("ParseLoopbackURL(%q) = %v, %v; want %v", again, ap2, err, ap)
			}
		}
	})
}

func FuzzParseLoopbackAddrPort(f *testing.F) {
	for _, s := range []string{"127.0.0.1:8090", "[::1]:0", "localhost:1", "[::ffff:127.0.0.1]:5", "0.0.0.0:1", "127.0.0.1:08", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ap, err := ParseLoopbackAddrPort(s)
		if err != nil {
			if !errors.Is(err, ErrNotLoopback) {
				t.Fatalf("ParseLoopbackAddrPort(%q): %v does not match ErrNotLoopback", s, err)
			}
			return
		}
		// net/netip reads the same address and port.
		want, perr := netip.ParseAddrPort(s)
		if perr != nil || netip.AddrPortFrom(want.Addr().Unmap(), want.Port()) != ap {
			t.Fatalf("accepted %q as %v; netip reads %v, %v", s, ap, want, perr)
		}
		if !ap.Addr().IsLoopback() || ap.Addr().Zone() != "" || ap.Addr().Is4In6() {
			t.Fatalf("accepted %q as %v", s, ap)
		}
	})
}

func FuzzIsLoopbackAuthority(f *testing.F) {
	for _, s := range []string{"localhost", "127.0.0.1:80", "[::1]:1", "evil.example", "localhost.evil.example", "::1", "[::ffff:127.0.0.1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if IsLoopbackOrigin("http://"+host) != IsLoopbackAuthority(host) {
			t.Fatalf("IsLoopbackOrigin and IsLoopbackAuthority disagree on %q", host)
		}
		if !IsLoopbackAuthority(host) {
			return
		}
		u, err := url.Parse("http://" + host + "/")
		if err != nil {
			t.Fatalf("accepted %q, which does not parse as an authority: %v", host, err)
		}
		// Whatever net/url sees as the host is localhost or a loopback
		// address in any spelling.
		name := strings.ToLower(u.Hostname())
		ip, err := netip.ParseAddr(name)
		if name != "localhost" && (err != nil || !ip.Unmap().IsLoopback() || ip.Zone() != "") {
			t.Fatalf("accepted %q (host %q)", host, name)
		}
		if !IsLoopbackHost(u.Hostname()) {
			t.Fatalf("accepted %q but not its host %q", host, u.Hostname())
		}
	})
}

func TestCheckLoopbackRequest(t *testing.T) {
	tests := []struct {
		name    string
		host    string
		origins []string
		present bool
		want    error
	}{
		{"loopback, no origin", "127.0.0.1:9464", nil, false, nil},
		{"localhost, loopback origin", "localhost:8090", []string{"http://localhost:8090"}, true, nil},
		{"rebinding host", "attacker.example:9464", nil, false, ErrForbiddenHost},
		{"empty host", "", nil, false, ErrForbiddenHost},
		{"foreign origin", "127.0.0.1", []string{"http://attacker.example"}, true, ErrForbiddenOrigin},
		{"two origins", "127.0.0.1", []string{"http://127.0.0.1", "http://127.0.0.1"}, true, ErrForbiddenOrigin},
		{"empty origin header", "127.0.0.1", []string{""}, true, ErrForbiddenOrigin},
		{"https origin", "127.0.0.1", []string{"https://127.0.0.1"}, true, ErrForbiddenOrigin},
	}
	for _, tt := range tests {
		if got := CheckLoopbackRequest(tt.host, tt.origins, tt.present); got != tt.want {
			t.Errorf("%s: CheckLoopbackRequest(%q, %q, %v) = %v, want %v", tt.name, tt.host, tt.origins, tt.present, got, tt.want)
		}
	}
}
