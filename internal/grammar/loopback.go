package grammar

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
)

// MaxLoopbackURLLen bounds the loopback URL ParseLoopbackURL accepts; the
// longest meaningful one, "http://[0000:0000:0000:0000:0000:0000:0000:0001]:65535/",
// is 56 bytes.
const MaxLoopbackURLLen = 128

// ErrNotLoopback is matched (errors.Is) by every refusal of
// ParseLoopbackAddrPort and ParseLoopbackURL.
var ErrNotLoopback = errors.New("not a loopback address")

// loopbackError is a refusal: its text is the reason alone.
type loopbackError string

func (e loopbackError) Error() string        { return string(e) }
func (e loopbackError) Is(target error) bool { return target == ErrNotLoopback }

const (
	errNotHostPort   = loopbackError("not host:port")
	errHost          = loopbackError("host is not a loopback address: use 127.0.0.1, [::1] or localhost")
	errHostIP        = loopbackError("host is not a loopback IP address: use 127.0.0.1 or [::1]")
	errListenPort    = loopbackError("port must be 0 to 65535, in decimal without sign or leading zero")
	errPort          = loopbackError("port must be 1 to 65535, in decimal without sign or leading zero")
	errURLTooLong    = loopbackError("longer than 128 bytes (MaxLoopbackURLLen)")
	errScheme        = loopbackError("must start with http://")
	errURLExtra      = loopbackError("only a host and a port are allowed after http:// (no credentials, path, query, fragment or escapes)")
	errURLPortNeeded = loopbackError("must name a port")
)

// localhostAddr is what "localhost" stands for: parsers return it so that
// nothing downstream resolves the name (/etc/hosts could point it
// elsewhere).
var localhostAddr = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// IsLoopbackAddr reports whether ip is a loopback address: 127.0.0.0/8,
// ::1, or an IPv4-mapped 127.0.0.0/8 address, without a zone.
func IsLoopbackAddr(ip netip.Addr) bool {
	return ip.Zone() == "" && ip.Unmap().IsLoopback()
}

// IsLoopbackHost reports whether host, without port or brackets, is a
// loopback host: "localhost" in any ASCII case or a loopback IP literal
// (IsLoopbackAddr) in netip's syntax (IPv4 in dotted decimal without
// leading zeros). Names under localhost ("localhost.evil.example") and
// "localhost." are not loopback hosts.
func IsLoopbackHost(host string) bool {
	_, ok := loopbackHost(host, true)
	return ok
}

// IsLoopbackAuthority reports whether authority, as in an HTTP Host
// header, is a loopback host (IsLoopbackHost; IPv6 in brackets) with an
// optional port of 1 to 65535. A bare IPv6 literal ("::1") is refused: it
// is not an authority.
func IsLoopbackAuthority(authority string) bool {
	host, port, hasPort, ok := splitAuthority(authority)
	if !ok || hasPort && !validPort(port, false) {
		return false
	}
	_, ok = loopbackHost(host, true)
	return ok
}

// IsLoopbackOrigin reports whether origin, as in an HTTP Origin header, is
// exactly "http://" and a loopback authority (IsLoopbackAuthority): no
// https, no path, not "null".
func IsLoopbackOrigin(origin string) bool {
	rest, ok := strings.CutPrefix(origin, "http://")
	return ok && IsLoopbackAuthority(rest)
}

// Why CheckLoopbackRequest refuses a request.
var (
	// ErrForbiddenHost: the Host header is not a loopback authority (a
	// DNS-rebinding page reaching a loopback port under its own name).
	ErrForbiddenHost = errors.New("forbidden: Host is not loopback")
	// ErrForbiddenOrigin: an Origin header is present and is not exactly
	// one loopback origin (a cross-origin page).
	ErrForbiddenOrigin = errors.New("forbidden: cross-origin request")
)

// CheckLoopbackRequest is the DNS-rebinding and cross-origin guard of every
// loopback HTTP listener (role ports, admin): host, the request's Host
// header, must be a loopback authority, and the Origin header, when
// present (origins holds its values), must be exactly one loopback origin.
// It returns nil, ErrForbiddenHost or ErrForbiddenOrigin.
func CheckLoopbackRequest(host string, origins []string, originPresent bool) error {
	if !IsLoopbackAuthority(host) {
		return ErrForbiddenHost
	}
	if originPresent && (len(origins) != 1 || !IsLoopbackOrigin(origins[0])) {
		return ErrForbiddenOrigin
	}
	return nil
}

// ParseLoopbackAddrPort parses a loopback listen address, "ip:port" with a
// loopback IP literal (IsLoopbackAddr; IPv6 in brackets) and a port of 0
// (any free port) to 65535. Names, "localhost" included, are refused so
// that what is bound is exactly what was written. The address is returned
// unmapped.
func ParseLoopbackAddrPort(addr string) (netip.AddrPort, error) {
	host, port, hasPort, ok := splitAuthority(addr)
	if !ok || !hasPort {
		return netip.AddrPort{}, errNotHostPort
	}
	ip, ok := loopbackHost(host, false)
	if !ok {
		return netip.AddrPort{}, errHostIP
	}
	if !validPort(port, true) {
		return netip.AddrPort{}, errListenPort
	}
	n, _ := strconv.ParseUint(port, 10, 16)
	return netip.AddrPortFrom(ip, uint16(n)), nil
}

// ParseLoopbackURL parses the base URL of a loopback HTTP endpoint:
// exactly "http://", a loopback host (IsLoopbackHost; IPv6 in brackets),
// ":" and a port of 1 to 65535, optionally followed by a single "/", and
// at most MaxLoopbackURLLen bytes. Credentials, paths, queries, fragments,
// percent-escapes and backslashes are refused. It returns the address to
// dial: "localhost" becomes 127.0.0.1 and IPv4-mapped addresses are
// unmapped, so "http://" + the result's String() is the canonical base.
func ParseLoopbackURL(raw string) (netip.AddrPort, error) {
	if len(raw) > MaxLoopbackURLLen {
		return netip.AddrPort{}, errURLTooLong
	}
	rest, ok := strings.CutPrefix(raw, "http://")
	if !ok {
		return netip.AddrPort{}, errScheme
	}
	rest = strings.TrimSuffix(rest, "/")
	if strings.ContainsAny(rest, "/?#@%\\") {
		return netip.AddrPort{}, errURLExtra
	}
	host, port, hasPort, ok := splitAuthority(rest)
	switch {
	case !ok:
		return netip.AddrPort{}, errHost
	case !hasPort:
		return netip.AddrPort{}, errURLPortNeeded
	}
	ip, ok := loopbackHost(host, true)
	if !ok {
		return netip.AddrPort{}, errHost
	}
	if !validPort(port, false) {
		return netip.AddrPort{}, errPort
	}
	n, _ := strconv.ParseUint(port, 10, 16)
	return netip.AddrPortFrom(ip, uint16(n)), nil
}

// splitAuthority splits "host", "host:port", "[v6]" or "[v6]:port". The
// host is returned without brackets; a bracketed host must hold a ':' and
// an unbracketed one must not. ok is false when the shape is wrong.
func splitAuthority(s string) (host, port string, hasPort, ok bool) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false, false
		}
		host, rest := s[1:end], s[end+1:]
		if !strings.Contains(host, ":") {
			return "", "", false, false
		}
		if rest == "" {
			return host, "", false, true
		}
		port, ok := strings.CutPrefix(rest, ":")
		return host, port, true, ok
	}
	host, port, hasPort = strings.Cut(s, ":")
	if strings.Contains(host, "[") || strings.Contains(host, "]") || strings.Contains(port, ":") {
		return "", "", false, false
	}
	return host, port, hasPort, true
}

// loopbackHost returns the address host stands for when it is a loopback
// host: an IP literal (unmapped) or, when names are allowed, "localhost".
func loopbackHost(host string, names bool) (netip.Addr, bool) {
	if names && strings.EqualFold(host, "localhost") {
		return localhostAddr, true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !IsLoopbackAddr(ip) {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// validPort accepts decimal 1 to 65535 (0 too when zero is true) without
// sign or leading zero.
func validPort(p string, zero bool) bool {
	if p == "0" {
		return zero
	}
	if len(p) == 0 || len(p) > 5 || p[0] == '0' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	n, err := strconv.Atoi(p)
	return err == nil && n <= 65535
}
