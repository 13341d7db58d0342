package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
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
	v.proxy()
	v.host()
	v.controller()
	sortByLine(v.errs)
	return v.errs
}

func (v *validator) node() {
	n := v.c.Node
	if n.Name != "" && !grammar.ValidNodeName(n.Name) {
		v.addf("node.name", "%q is not a valid node name: use %s", n.Name, grammar.NodeNameSyntax)
	}
	if strings.TrimSpace(n.DataDir) == "" {
		v.addf("node.data_dir", "must not be empty")
	}
	for _, k := range sortedKeys(n.Labels) {
		p := "node.labels." + k
		if !grammar.ValidLabelKey(k) {
			// One capability word: the key becomes capability label.<key>.
			v.addf(p, "label key %q is not a valid label key: use %s", k, grammar.LabelKeySyntax)
		}
		if !grammar.ValidLabelValue(n.Labels[k]) {
			v.addf(p, "label value must be at most %d printable ASCII characters", grammar.MaxLabelValueLen)
		}
	}
	if n.Class != "" && !grammar.ValidNodeClass(n.Class) {
		// One capability word: the class becomes capability node.class.<class>.
		v.addf("node.class", "%q is not a valid node class: use %s", n.Class, grammar.NodeClassSyntax)
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
	} else if ap, err := grammar.ParseLoopbackAddrPort(a.Listen); err != nil {
		v.addf("admin.listen", "%q: %v", a.Listen, err)
	} else {
		port = int(ap.Port())
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
	v.positive("mesh.liveness_timeout", m.LivenessTimeout) // its range is the mesh's (mesh.Config.Validate)
	v.intRange("mesh.max_inflight_per_peer", int64(m.MaxInflightPerPeer), MaxConcurrency)
	v.intRange("mesh.max_inflight_total", int64(m.MaxInflightTotal), MaxConcurrency)
	if m.MaxInflightPerPeer > m.MaxInflightTotal && m.MaxInflightTotal > 0 {
		v.addf("mesh.max_inflight_per_peer", "%d is more than mesh.max_inflight_total (%d)", m.MaxInflightPerPeer, m.MaxInflightTotal)
	}
	if m.InferTransport != InferTransportTCP && m.InferTransport != InferTransportQUIC {
		v.addf("mesh.infer_transport", "%q: want %s or %s", m.InferTransport, InferTransportTCP, InferTransportQUIC)
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
			case !grammar.ValidName(p.Name):
				v.addf(base+".name", "%q is not a valid name: use %s", p.Name, grammar.NameSyntax)
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
		if _, ok := grammar.TrustTierRank(p.Tier); !ok && p.Tier != "" {
			v.addf(base+".tier", "%q is not a tier: use %s", p.Tier, grammar.TrustTierWords())
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
		if !grammar.ValidName(r.Name) {
			v.addf(base+".name", "%q is not a valid role name: use %s", r.Name, grammar.NameSyntax)
		} else if first, dup := roles[r.Name]; dup {
			v.addf(base+".name", "duplicate role %q (first at %s)", r.Name, first)
		} else {
			roles[r.Name] = base
		}
		if r.Listen == "" {
			v.addf(base+".listen", "must not be empty")
		} else if ap, err := grammar.ParseLoopbackAddrPort(r.Listen); err != nil {
			v.addf(base+".listen", "%q: %v", r.Listen, err)
		} else if port := int(ap.Port()); port > 0 {
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
	type instKey struct {
		role string
		addr netip.AddrPort
	}
	insts := map[instKey]string{}
	for i, in := range inf.Instances {
		base := "inference.instances[" + strconv.Itoa(i) + "]"
		if in.Role == "" {
			v.addf(base+".role", "must not be empty")
		} else if _, ok := roles[in.Role]; !ok {
			v.addf(base+".role", "%q names no configured role", in.Role)
		}
		if k, ok := grammar.LookupRuntime(in.Runtime); !ok || !k.Adoptable {
			v.addf(base+".runtime", "%q is not a runtime: use %s", in.Runtime, orList(grammar.AdoptableRuntimes()))
		}
		// The runner refuses what ParseLoopbackURL refuses, and two
		// instances of a role at one address, however spelled.
		if in.URL == "" {
			v.addf(base+".url", "must not be empty")
		} else if ap, err := grammar.ParseLoopbackURL(in.URL); err != nil {
			v.addf(base+".url", "%q: %v", in.URL, err)
		} else if first, dup := insts[instKey{in.Role, ap}]; dup {
			v.addf(base, "duplicate instance %q for role %q (first at %s)", in.URL, in.Role, first)
		} else {
			insts[instKey{in.Role, ap}] = base
		}
	}
	v.positive("inference.probe_interval", inf.ProbeInterval)
	l := inf.Limits
	v.intRange("inference.limits.max_body_bytes", l.MaxBodyBytes, MaxBodyLimit)
	v.intRange("inference.limits.mesh_max_body_bytes", l.MeshMaxBodyBytes, MaxBodyLimit)
	v.intRange("inference.limits.max_response_bytes", l.MaxResponseBytes, MaxBodyLimit)
	v.positive("inference.limits.stall_timeout", l.StallTimeout)
	v.positive("inference.limits.request_timeout", l.RequestTimeout)
	v.positive("inference.limits.body_timeout", l.BodyTimeout)
	v.intRange("inference.limits.concurrency", int64(l.Concurrency), MaxConcurrency)
	v.intRange("inference.limits.max_connections", int64(l.MaxConnections), MaxConcurrency)
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
	v.readers("host.readers", v.c.Host.Readers)
	v.isolation(v.c.Host.Isolation)
}

// isolation checks host.isolation.
func (v *validator) isolation(iso Isolation) {
	for _, m := range []struct{ path, val string }{
		{"host.isolation.filesystem", iso.Filesystem}, {"host.isolation.resources", iso.Resources},
	} {
		if m.val != "on" && m.val != "off" {
			v.addf(m.path, "%q: use on or off", m.val)
		}
	}
	if iso.Users != "auto" && iso.Users != "on" && iso.Users != "off" {
		v.addf("host.isolation.users", "%q: use auto, on or off", iso.Users)
	}
	if _, _, err := ParseUIDRange(iso.UIDRange); err != nil {
		v.addf("host.isolation.uid_range", "%v", err)
	}
	if iso.PidsMax < 0 || iso.PidsMax > MaxPidsMax {
		v.addf("host.isolation.pids_max", "%d is out of range: use 0 (no bound) to %d", iso.PidsMax, MaxPidsMax)
	}
	if len(iso.ReadPaths) > MaxReadPaths {
		v.addf("host.isolation.read_paths", "%d paths, at most %d", len(iso.ReadPaths), MaxReadPaths)
	}
	for i, p := range iso.ReadPaths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || len(p) > maxIsolationPath || strings.IndexByte(p, 0) >= 0 {
			v.addf("host.isolation.read_paths["+strconv.Itoa(i)+"]", "%q must be an absolute clean path", p)
		}
	}
}

// ParseUIDRange parses host.isolation.uid_range: "first-last", first
// above 1000 (no system or login account), at least two ids, last below
// 2^31.
func ParseUIDRange(s string) (first, count uint32, err error) {
	a, b, ok := strings.Cut(s, "-")
	lo, err1 := strconv.ParseUint(a, 10, 32)
	hi, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q: use first-last, two decimal ids", s)
	}
	if lo < 1000 || hi <= lo || hi >= 1<<31 {
		return 0, 0, fmt.Errorf("%q: first must be 1000 or more, last above first and below 2147483648", s)
	}
	return uint32(lo), uint32(hi - lo + 1), nil
}

// readers checks host.readers: every entry is a 64-hex key or the name of
// a configured peer, and no two entries name the same node (a name and
// the key its peer is configured with count as the same).
func (v *validator) readers(path string, refs []string) {
	seen := map[string]string{}
	for i, ref := range refs {
		p := path + "[" + strconv.Itoa(i) + "]"
		var who string
		if checkKey(ref) == nil {
			who = "key " + strings.ToLower(ref)
		} else if idx, ok := v.peers.byName[ref]; ok && ref != "" {
			who = "peer " + strconv.Itoa(idx)
			if k := v.c.Mesh.Peers[idx].Key; checkKey(k) == nil {
				who = "key " + strings.ToLower(k)
			}
		} else {
			v.addf(p, "%q is neither a key (64 hex characters) nor the name of a configured peer", ref)
			continue
		}
		if first, dup := seen[who]; dup {
			v.addf(p, "%q names the same node as %s", ref, first)
		} else {
			seen[who] = p
		}
	}
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
	v.positive("controller.describe_timeout", c.DescribeTimeout)
	v.positive("controller.place_timeout", c.PlaceTimeout)
	v.positive("controller.reschedule_window", c.RescheduleWindow)
	v.atMost("controller.reschedule_window", c.RescheduleWindow, MaxRescheduleWindow)
	v.nonNegative("controller.swap_grace", c.SwapGrace)
	v.atMost("controller.swap_grace", c.SwapGrace, MaxSwapGrace)
	if c.Tick.Valid() && c.DeadAfter.Valid() && c.Tick.D > 0 && c.DeadAfter.D > 0 && c.DeadAfter.D < c.Tick.D {
		v.addf("controller.dead_after", "%s is shorter than controller.tick (%s)", c.DeadAfter, c.Tick)
	}
	v.atMost("controller.retry_backoff", c.RetryBackoff, MaxRetryBackoff)
	v.atMost("controller.describe_timeout", c.DescribeTimeout, MaxDescribeTimeout)
	v.atMost("controller.place_timeout", c.PlaceTimeout, MaxPlaceTimeout)
	if c.MaxReschedules < 0 || c.MaxReschedules > MaxReschedulesLimit {
		v.addf("controller.max_reschedules", "%d is out of range: use 0 to %d", c.MaxReschedules, MaxReschedulesLimit)
	}
	v.keyList("controller.trust_anchors", c.TrustAnchors)
	v.voters("controller.voters", c)
	v.policy(c.Policy)
	names := map[string]string{}
	for i, w := range c.Workloads {
		base := "controller.workloads[" + strconv.Itoa(i) + "]"
		if !grammar.ValidName(w.Name) {
			v.addf(base+".name", "%q is not a valid workload name: use %s", w.Name, grammar.NameSyntax)
		} else if first, dup := names[w.Name]; dup {
			v.addf(base+".name", "duplicate workload %q (first at %s)", w.Name, first)
		} else {
			names[w.Name] = base
		}
		switch {
		case w.Package == "":
			v.addf(base+".package", "must not be empty")
		case !grammar.ValidName(w.Package):
			v.addf(base+".package", "%q is not a package id: use %s", w.Package, grammar.NameSyntax)
		}
		if w.Version != "" && !grammar.ValidVersion(w.Version) {
			v.addf(base+".version", "%q is not a version: use %s (or leave it out for the newest)", w.Version, grammar.VersionSyntax)
		}
		if w.Variant != "" && !grammar.ValidName(w.Variant) {
			v.addf(base+".variant", "%q is not a variant name: use %s", w.Variant, grammar.NameSyntax)
		}
		v.nodeRef(base+".node", w.Node, true)
		v.nodeRefs(base+".prefer", w.Prefer)
		v.nodeRefs(base+".avoid", w.Avoid)
		switch {
		case w.OnDemand.Enabled && w.Replicas < 1:
			v.addf(base+".replicas", "%d is out of range: an on-demand workload runs no instance while idle by itself; replicas is the most it runs: use 1 (the default) to %d", w.Replicas, MaxReplicas)
		case w.Replicas < 1 || w.Replicas > MaxReplicas:
			v.addf(base+".replicas", "%d is out of range: use 1 (the default) to %d", w.Replicas, MaxReplicas)
		}
		if w.Node != "" && w.Replicas > 1 {
			v.addf(base+".replicas", "%d replicas cannot all be on the pinned node %q: replicas go to distinct nodes", w.Replicas, w.Node)
		}
		v.onDemand(base+".on_demand", w.OnDemand)
	}
}

// voters checks controller.voters: each entry names a configured mesh
// peer whose key is pinned in the file (a voter is trusted with the
// controller's state, so trust on first contact is not enough), none
// twice and never this node; at most MaxVoters controllers in all.
func (v *validator) voters(path string, c Controller) {
	if len(c.Voters) > 0 && !c.Enabled {
		v.addf(path, "is set but controller.enabled is false: only a controller has voters")
	}
	if n := len(c.Voters) + 1; n > MaxVoters {
		v.addf(path, "%d controllers (this node and %d voters) are more than %d: a larger voter set slows every write and survives no more failures that matter", n, len(c.Voters), MaxVoters)
	}
	seen := map[string]string{}
	for i, ref := range c.Voters {
		p := path + "[" + strconv.Itoa(i) + "]"
		idx, ok := v.peers.byName[ref]
		switch {
		case ref == SelfRef || ref == v.c.Node.Name && ref != "":
			v.addf(p, "%q is this node: list only the other controllers", ref)
			continue
		case !ok || ref == "":
			v.addf(p, "%q is not the name of a peer in mesh.peers", ref)
			continue
		case checkKey(v.c.Mesh.Peers[idx].Key) != nil:
			v.addf(p, "peer %q has no key in mesh.peers: a voter's key must be pinned in the file", ref)
		}
		if first, dup := seen[ref]; dup {
			v.addf(p, "%q is listed twice (first at %s)", ref, first)
		} else {
			seen[ref] = p
		}
	}
}

// policy checks controller.policy.
func (v *validator) policy(p Policy) {
	kinds := make([]string, 0, len(p.Kinds))
	for k := range p.Kinds {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		path := "controller.policy.kinds." + k
		if !grammar.ValidName(k) {
			v.addf(path, "%q is not a valid workload kind: use %s", k, grammar.NameSyntax)
		}
		if _, ok := grammar.TrustTierRank(p.Kinds[k].MinTier); !ok {
			v.addf(path+".min_tier", "%q is not a tier: use %s", p.Kinds[k].MinTier, grammar.TrustTierWords())
		}
	}
	v.nodeRefs("controller.policy.deny_nodes", p.DenyNodes)
	for _, k := range sortedKeys(p.DenyLabels) {
		path := "controller.policy.deny_labels." + k
		if !grammar.ValidLabelKey(k) {
			v.addf(path, "label key %q is not a valid label key: use %s", k, grammar.LabelKeySyntax)
		}
		if val := p.DenyLabels[k]; val != "*" && !grammar.ValidLabelValue(val) {
			v.addf(path, "%q is not a label value: use at most %d printable ASCII characters, or * for any value", val, grammar.MaxLabelValueLen)
		}
	}
}

// nodeRefs checks a list of node references, each once.
func (v *validator) nodeRefs(path string, refs []string) {
	seen := map[string]string{}
	for i, ref := range refs {
		p := path + "[" + strconv.Itoa(i) + "]"
		if !v.nodeRef(p, ref, false) {
			continue
		}
		if first, dup := seen[ref]; dup {
			v.addf(p, "%q is listed twice (first at %s)", ref, first)
		} else {
			seen[ref] = p
		}
	}
}

// nodeRef checks one node reference of the controller: "self", a node
// id, or a node or peer name (resolved when the controller runs: a peer
// pinned on first contact has no id until then). An empty ref is allowed
// only where it means "none".
func (v *validator) nodeRef(path, ref string, optional bool) bool {
	switch {
	case ref == "" && optional:
		return true
	case ref == "":
		v.addf(path, "must not be empty")
		return false
	case ref == SelfRef, isNodeIDRef(ref), grammar.ValidNodeName(ref):
		return true
	}
	v.addf(path, "%q is neither a node name nor a node id", ref)
	return false
}

// atMost reports a valid duration above hi.
func (v *validator) atMost(path string, d Duration, hi time.Duration) {
	if d.Valid() && d.D > hi {
		v.addf(path, "%s is above the limit of %s", d, hi)
	}
}

func (v *validator) nonNegative(path string, d Duration) {
	switch {
	case !d.Valid():
		v.addf(path, "invalid duration %q: use a Go duration such as 500ms, 15s or 5m", d.raw)
	case d.D < 0:
		v.addf(path, "must not be negative, got %s", d.D)
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

// checkKey checks an ed25519 public key written as 64 hex characters.
func checkKey(k string) error {
	_, err := ParseKey(k)
	return err
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

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
