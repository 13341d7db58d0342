package table

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ValidRole reports whether role is a valid role name: 1 to MaxRoleLen
// bytes, an ASCII letter or digit first, then ASCII letters, digits and
// ". _ + : -" only (so never a '/', which would let a role name a path).
func ValidRole(role string) bool {
	if len(role) == 0 || len(role) > MaxRoleLen {
		return false
	}
	for i := 0; i < len(role); i++ {
		c := role[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '+' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// ParseLoopbackBase checks that base is exactly "http://" + a loopback host
// + ":" + a nonzero port, optionally followed by a single "/", and returns
// its canonical form without the trailing slash. The host is an IPv4
// loopback address (127.0.0.0/8, dotted decimal without leading zeros), the
// bracketed IPv6 loopback address ("[::1]" in any spelling, no zone), or the
// name "localhost" (any case; canonicalised to lower case). Everything else
// is refused with an error wrapping ErrNotLoopback: other schemes, other
// names (including "localhost.<anything>"), userinfo, paths, queries,
// fragments, percent-escapes, a missing, zero, signed or zero-padded port,
// and IPv4-mapped IPv6 addresses.
//
// The check is purely syntactic: the table only ever stores an endpoint on
// this host, so registering it can never make the proxy reach another
// machine.
func ParseLoopbackBase(base string) (string, error) {
	host, port, why := splitLoopbackBase(base)
	if why != "" {
		// %q keeps control bytes of a hostile base out of log lines.
		if len(base) > MaxBaseURLLen {
			base = base[:MaxBaseURLLen] + "..."
		}
		return "", fmt.Errorf("%w: %q: %s", ErrNotLoopback, base, why)
	}
	return "http://" + host + ":" + port, nil
}

// splitLoopbackBase returns the canonical host (bracketed for IPv6) and
// port of base, or a reason it is refused.
func splitLoopbackBase(base string) (host, port, why string) {
	if len(base) > MaxBaseURLLen {
		return "", "", "too long"
	}
	const scheme = "http://"
	if !strings.HasPrefix(base, scheme) {
		return "", "", "scheme must be http://"
	}
	hostport := strings.TrimSuffix(base[len(scheme):], "/")
	if i := strings.IndexAny(hostport, "/?#@%\\"); i >= 0 {
		return "", "", "only a host and port are allowed"
	}
	var rawHost string
	if strings.HasPrefix(hostport, "[") {
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return "", "", "unterminated ipv6 literal"
		}
		rawHost = hostport[1:end]
		rest := hostport[end+1:]
		if !strings.HasPrefix(rest, ":") {
			return "", "", "missing port"
		}
		port = rest[1:]
		addr, err := netip.ParseAddr(rawHost)
		if err != nil || !addr.Is6() || addr.Is4In6() || addr.Zone() != "" || !addr.IsLoopback() {
			return "", "", "host is not a loopback address"
		}
		host = "[" + addr.String() + "]"
	} else {
		i := strings.LastIndexByte(hostport, ':')
		if i < 0 {
			return "", "", "missing port"
		}
		rawHost, port = hostport[:i], hostport[i+1:]
		if strings.EqualFold(rawHost, "localhost") {
			host = "localhost"
		} else {
			addr, err := netip.ParseAddr(rawHost)
			if err != nil || !addr.Is4() || !addr.IsLoopback() {
				return "", "", "host is not a loopback address"
			}
			host = addr.String()
		}
	}
	if !validPort(port) {
		return "", "", "port must be 1 to 65535"
	}
	return host, port, ""
}

// validPort accepts a plain decimal 1..65535 without sign or leading zero.
func validPort(p string) bool {
	if len(p) == 0 || len(p) > 5 || p[0] == '0' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}
