package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// ValidationError is one problem found by Validate. Line is the line the
// offending key was read from (see Config.Line), 0 when unknown.
type ValidationError struct {
	Line int
	Path string
	Msg  string
}

// Error formats the problem as "line N: <path>: <message>", or
// "<path>: <message>" when the line is unknown.
func (e *ValidationError) Error() string { return formatProblem(e.Line, e.Path, e.Msg) }

// Validate checks the config statically and reports every problem at
// once, joined with errors.Join, each a *ValidationError, in line order
// (problems without a line first, then check order within a line). At
// most MaxProblems are listed; one last problem counts the rest. It reads no files and resolves no
// names: stateful checks belong to the components.
func (c *Config) Validate() error {
	return errors.Join(capProblems(c.validate(), func(msg string) error { return &ValidationError{Msg: msg} })...)
}

type validator struct {
	c     *Config
	peers peerRefIndex
	errs  []error
}

func (v *validator) addf(path, format string, args ...any) {
	v.errs = append(v.errs, &ValidationError{Line: v.c.Line(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (c *Config) validate() []error {
	v := &validator{c: c, peers: newPeerRefIndex(c.Mesh.Peers)}
	v.node()
	v.log()
	adminPort := v.admin()
	v.mesh()
	v.inference(adminPort)
	v.host()
	v.controller()
	sortByLine(v.errs)
	return v.errs
}

func (v *validator) node() {
	n := v.c.Node
	if n.Name != "" && !validNodeName(n.Name) {
		v.addf("node.name", "%q is not a valid name: use 1 to %d of A-Z a-z 0-9 . _ -", n.Name, MaxNameLen)
	}
	if strings.TrimSpace(n.DataDir) == "" {
		v.addf("node.data_dir", "must not be empty")
	}
	for _, k := range sortedKeys(n.Labels) {
		p := "node.labels." + k
		if !validToken(k) {
			v.addf(p, "label key %q is not a valid name: use 1 to %d of a-z 0-9 . _ -", k, MaxNameLen)
		}
		if val := n.Labels[k]; len(val) > MaxLabelValueLen || !printableASCII(val) {
			v.addf(p, "label value must be at most %d printable ASCII characters", MaxLabelValueLen)
		}
	}
}

func (v *validator) log() {
	switch v.c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		v.addf("log.level", "%q is not a log level: use debug, info, warn or error", v.c.Log.Level)
	}
	switch v.c.Log.Format {
	case "auto", "json", "console":
	default:
		v.addf("log.format", "%q is not a log format: use auto, json or console", v.c.Log.Format)
	}
}

// admin checks the admin section and returns the admin port, 0 if none.
func (v *validator) admin() int {
	a := v.c.Admin
	port := 0
	if a.Listen == "" {
		v.addf("admin.listen", "must not be empty")
	} else if p, err := loopbackListen(a.Listen); err != nil {
		v.addf("admin.listen", "%v", err)
	} else {
		port = p
	}
	sock := v.c.SocketPath()
	switch {
	case strings.ContainsRune(sock, 0):
		v.addf("admin.socket", "must not contain a NUL byte")
	case len(sock) > MaxSocketPathLen:
		v.addf("admin.socket", "socket path %q is %d bytes, more than the limit of %d", sock, len(sock), MaxSocketPathLen)
	}
	return port
}

func (v *validator) mesh() {
	m := v.c.Mesh
	if m.Listen != "" {
		if _, _, err := hostPort(m.Listen, true); err != nil {
			v.addf("mesh.listen", "%v", err)
		}
	}
	v.positive("mesh.keepalive", m.Keepalive)
	v.intRange("mesh.max_inflight_per_peer", int64(m.MaxInflightPerPeer), MaxConcurrency)
	v.intRange("mesh.max_inflight_total", int64(m.MaxInflightTotal), MaxConcurrency)
	if m.MaxInflightPerPeer > m.MaxInflightTotal && m.MaxInflightTotal > 0 {
		v.addf("mesh.max_inflight_per_peer", "%d is more than mesh.max_inflight_total (%d)", m.MaxInflightPerPeer, m.MaxInflightTotal)
	}
	if len(m.Peers) > 0 && m.Listen == "" {
		v.addf("mesh.peers", "peers are listed but mesh.listen is empty (no mesh)")
	}
	names := map[string]string{}
	addrs := map[string]string{}
	keys := map[string]string{}
	for i, p := range m.Peers {
		base := "mesh.peers[" + strconv.Itoa(i) + "]"
		if p.Name != "" {
			switch {
			case !validToken(p.Name):
				v.addf(base+".name", "%q is not a valid name: use 1 to %d of a-z 0-9 . _ -", p.Name, MaxNameLen)
			case isNodeIDRef(p.Name):
				v.addf(base+".name", "%q has the form of a node id; peer names must not", p.Name)
			}
			if first, dup := names[p.Name]; dup {
				v.addf(base+".name", "duplicate peer name %q (first at %s)", p.Name, first)
			} else {
				names[p.Name] = base
			}
		}
		if p.Addr == "" {
			v.addf(base+".addr", "must not be empty")
		} else if _, _, err := hostPort(p.Addr, false); err != nil {
			v.addf(base+".addr", "%v", err)
		} else {
			a := strings.ToLower(p.Addr)
			if first, dup := addrs[a]; dup {
				v.addf(base+".addr", "duplicate peer address %q (first at %s)", p.Addr, first)
			} else {
				addrs[a] = base
			}
		}
		if p.Key != "" {
			if err := checkKey(p.Key); err != nil {
				v.addf(base+".key", "%v", err)
			} else {
				k := strings.ToLower(p.Key)
				if first, dup := keys[k]; dup {
					v.addf(base+".key", "duplicate peer key (first at %s)", first)
				} else {
					keys[k] = base
				}
			}
		}
		switch p.Tier {
		case "", TierDiscovered, TierPaired, TierPinned:
		default:
			v.addf(base+".tier", "%q is not a tier: use discovered, paired or pinned", p.Tier)
		}
	}
}

func (v *validator) inference(adminPort int) {
	inf := v.c.Inference
	roles := map[string]string{}
	ports := map[int]string{}
	if adminPort > 0 {
		ports[adminPort] = "admin.listen"
	}
	for i, r := range inf.Roles {
		base := "inference.roles[" + strconv.Itoa(i) + "]"
		if !validToken(r.Name) {
			v.addf(base+".name", "%q is not a valid role name: use 1 to %d of a-z 0-9 . _ -", r.Name, MaxNameLen)
		} else if first, dup := roles[r.Name]; dup {
			v.addf(base+".name", "duplicate role %q (first at %s)", r.Name, first)
		} else {
			roles[r.Name] = base
		}
		if r.Listen == "" {
			v.addf(base+".listen", "must not be empty")
		} else if port, err := loopbackListen(r.Listen); err != nil {
			v.addf(base+".listen", "%v", err)
		} else if port > 0 {
			if first, dup := ports[port]; dup {
				v.addf(base+".listen", "port %d is already used by %s", port, first)
			} else {
				ports[port] = base + ".listen"
			}
		}
		if r.Concurrency < 0 || r.Concurrency > MaxConcurrency {
			v.addf(base+".concurrency", "%d is out of range: use 0 (the default) to %d", r.Concurrency, MaxConcurrency)
		}
		v.peerRefs(base+".serve_to", r.ServeTo)
		v.peerRefs(base+".use_from", r.UseFrom)
	}
	type instKey struct{ role, url string }
	insts := map[instKey]string{}
	for i, in := range inf.Instances {
		base := "inference.instances[" + strconv.Itoa(i) + "]"
		if in.Role == "" {
			v.addf(base+".role", "must not be empty")
		} else if _, ok := roles[in.Role]; !ok {
			v.addf(base+".role", "%q names no configured role", in.Role)
		}
		switch in.Runtime {
		case "llama.cpp", "ollama", "mlx-lm", "openai":
		default:
			v.addf(base+".runtime", "%q is not a runtime: use llama.cpp, ollama, mlx-lm or openai", in.Runtime)
		}
		if err := checkInstanceURL(in.URL); err != nil {
			v.addf(base+".url", "%v", err)
		}
		k := instKey{in.Role, in.URL}
		if first, dup := insts[k]; dup {
			v.addf(base, "duplicate instance %q for role %q (first at %s)", in.URL, in.Role, first)
		} else {
			insts[k] = base
		}
	}
	v.positive("inference.probe_interval", inf.ProbeInterval)
	l := inf.Limits
	v.intRange("inference.limits.max_body_bytes", l.MaxBodyBytes, MaxBodyLimit)
	v.intRange("inference.limits.mesh_max_body_bytes", l.MeshMaxBodyBytes, MaxBodyLimit)
	v.intRange("inference.limits.max_response_bytes", l.MaxResponseBytes, MaxBodyLimit)
	v.positive("inference.limits.stall_timeout", l.StallTimeout)
	v.positive("inference.limits.request_timeout", l.RequestTimeout)
	v.intRange("inference.limits.concurrency", int64(l.Concurrency), MaxConcurrency)
}

// peerRefs checks a serve_to or use_from list: every entry must resolve
// with PeerByRef, once.
func (v *validator) peerRefs(path string, refs []string) {
	seen := map[int]string{}
	for i, ref := range refs {
		p := path + "[" + strconv.Itoa(i) + "]"
		idx, ok := v.peers.lookup(ref)
		switch {
		case ref == "":
			v.addf(p, "must not be empty")
		case !ok && isNodeIDRef(ref):
			v.addf(p, "%q matches the key of no configured peer (name a peer that has no key)", ref)
		case !ok:
			v.addf(p, "%q names no configured peer", ref)
		default:
			if first, dup := seen[idx]; dup {
				v.addf(p, "%q names the same peer as %s", ref, first)
			} else {
				seen[idx] = p
			}
		}
	}
}

func (v *validator) host() {
	v.keyList("host.controllers", v.c.Host.Controllers)
	v.keyList("host.trust_anchors", v.c.Host.TrustAnchors)
}

func (v *validator) keyList(path string, keys []string) {
	seen := map[string]string{}
	for i, k := range keys {
		p := path + "[" + strconv.Itoa(i) + "]"
		if err := checkKey(k); err != nil {
			v.addf(p, "%v", err)
			continue
		}
		lk := strings.ToLower(k)
		if first, dup := seen[lk]; dup {
			v.addf(p, "duplicate key (first at %s)", first)
		} else {
			seen[lk] = p
		}
	}
}

func (v *validator) controller() {
	c := v.c.Controller
	v.positive("controller.tick", c.Tick)
	v.positive("controller.dead_after", c.DeadAfter)
	v.positive("controller.retry_backoff", c.RetryBackoff)
	if c.Tick.Valid() && c.DeadAfter.Valid() && c.Tick.D > 0 && c.DeadAfter.D > 0 && c.DeadAfter.D < c.Tick.D {
		v.addf("controller.dead_after", "%s is shorter than controller.tick (%s)", c.DeadAfter, c.Tick)
	}
	names := map[string]string{}
	for i, w := range c.Workloads {
		base := "controller.workloads[" + strconv.Itoa(i) + "]"
		if !validToken(w.Name) {
			v.addf(base+".name", "%q is not a valid workload name: use 1 to %d of a-z 0-9 . _ -", w.Name, MaxNameLen)
		} else if first, dup := names[w.Name]; dup {
			v.addf(base+".name", "duplicate workload %q (first at %s)", w.Name, first)
		} else {
			names[w.Name] = base
		}
		if w.Package == "" {
			v.addf(base+".package", "must not be empty")
		}
		if w.Node != "" && !validToken(w.Node) {
			v.addf(base+".node", "%q is neither a node name nor a node id", w.Node)
		}
	}
}

func (v *validator) positive(path string, d Duration) {
	switch {
	case !d.Valid():
		v.addf(path, "invalid duration %q: use a Go duration such as 500ms, 15s or 5m", d.raw)
	case d.D <= 0:
		v.addf(path, "must be a positive duration, got %s", d.D)
	}
}

func (v *validator) intRange(path string, n, hi int64) {
	if n < 1 || n > hi {
		v.addf(path, "%d is out of range: use 1 to %d", n, hi)
	}
}

// validToken reports whether s is a role, peer, workload or label name:
// 1 to MaxNameLen of a-z 0-9 . _ -, and not "." or "..".
func validToken(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// validNodeName is validToken with upper case allowed, since node.name
// is often a host name.
func validNodeName(s string) bool { return validToken(strings.ToLower(s)) }

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkKey checks an ed25519 public key written as 64 hex characters.
func checkKey(k string) error {
	if len(k) != 64 {
		return fmt.Errorf("key must be 64 hex characters (an ed25519 public key), got %d characters", len(k))
	}
	if _, err := hex.DecodeString(k); err != nil {
		return errors.New("key must be 64 hex characters (an ed25519 public key), got a non-hex character")
	}
	return nil
}

// hostPort splits a host:port address. Port 0 is allowed only when
// listening. An empty host is allowed only when listening (all
// interfaces).
func hostPort(addr string, listen bool) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port", addr)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || ps[0] == '+' || ps[0] == '-' || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q has an invalid port %q", addr, ps)
	}
	if !listen {
		if host == "" {
			return "", 0, fmt.Errorf("%q has no host", addr)
		}
		if port == 0 {
			return "", 0, fmt.Errorf("%q has port 0", addr)
		}
	}
	return host, port, nil
}

// loopbackListen checks a listen address that must be loopback and
// returns its port (0 = any free port, allowed for tests).
func loopbackListen(addr string) (int, error) {
	host, port, err := hostPort(addr, true)
	if err != nil {
		return 0, err
	}
	if !isLoopbackHost(host) {
		return 0, fmt.Errorf("%q is not a loopback address: use 127.0.0.1, [::1] or localhost", addr)
	}
	return port, nil
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}

// checkInstanceURL checks an adopted instance URL: http, a loopback
// host, an explicit port, no credentials, query or fragment.
func checkInstanceURL(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" {
		return fmt.Errorf("%q is not a URL", s)
	}
	switch {
	case u.Scheme != "http":
		return fmt.Errorf("%q must use http://", s)
	case u.User != nil:
		return fmt.Errorf("%q must not carry credentials", s)
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return fmt.Errorf("%q must not have a query or fragment", s)
	case !isLoopbackHost(u.Hostname()):
		return fmt.Errorf("%q is not a loopback URL: use 127.0.0.1, [::1] or localhost", s)
	case u.Port() == "":
		return fmt.Errorf("%q must name a port", s)
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q has an invalid port", s)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
