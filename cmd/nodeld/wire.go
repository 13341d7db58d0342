package main

import (
	"runtime/debug"
	"time"

	"github.com/nodeld/nodeld/internal/admin"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/meshproxy"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/table"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func buildGoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}

// peerIDs turns allowlist entries (peer names or node ids) into node ids
// through the mesh, which knows every configured peer's pinned key. A
// named peer not yet pinned has no id until its first contact, so it is
// left out until then (OnPeersChanged re-applies). Without a mesh there
// are no peers: config validation refuses allowlists that name none.
func (n *node) peerIDs(refs []string) []string {
	if n.mesh == nil {
		return nil
	}
	var ids []string
	for _, ref := range refs {
		if id, ok := n.mesh.ResolveRef(ref); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// applyRolePolicy applies the role policies of the config in force, with
// the allowlists' peers as the mesh resolves them now.
func (n *node) applyRolePolicy() { n.table.ApplyPolicy(n.rolePolicies(n.config())) }

// peersChanged is the mesh's OnPeersChanged: a peer pinned on first
// contact (or a config change) altered who is who, so the allowlists and
// the controller's targets and node references are resolved again.
func (n *node) peersChanged() {
	n.applyRolePolicy()
	if n.ctrl != nil {
		n.ctrl.Refresh()
	}
}

func (n *node) rolePolicies(cfg *config.Config) map[string]table.RolePolicy {
	p := make(map[string]table.RolePolicy, len(cfg.Inference.Roles))
	for _, r := range cfg.Inference.Roles {
		p[r.Name] = table.RolePolicy{
			Expose:  r.Expose,
			ServeTo: n.peerIDs(r.ServeTo),
			UseFrom: n.peerIDs(r.UseFrom),
		}
	}
	return p
}

func proxyConfig(cfg *config.Config) proxy.Config {
	l := cfg.Inference.Limits
	pc := proxy.Config{
		MaxBodyBytes:     l.MaxBodyBytes,
		MeshMaxBodyBytes: l.MeshMaxBodyBytes,
		MaxResponseBytes: l.MaxResponseBytes,
		StallTimeout:     l.StallTimeout.D,
		RequestTimeout:   l.RequestTimeout.D,
		BodyTimeout:      l.BodyTimeout.D,
		MaxConnections:   l.MaxConnections,
		Hold: proxy.HoldConfig{MaxWait: cfg.Proxy.Hold.MaxWait.D, Queue: cfg.Proxy.Hold.Queue,
			Keepalive: cfg.Proxy.Hold.Keepalive.D, Remember: cfg.Proxy.Hold.Remember.D},
	}
	for _, r := range cfg.Inference.Roles {
		pc.Roles = append(pc.Roles, proxy.RoleConfig{Name: r.Name, Listen: r.Listen, Concurrency: l.ConcurrencyFor(r),
			ModelPassthrough: r.ModelPassthrough})
	}
	return pc
}

func meshConfig(cfg *config.Config) mesh.Config {
	mc := mesh.Config{Listen: cfg.Mesh.Listen, Keepalive: cfg.Mesh.Keepalive.D, LivenessTimeout: cfg.Mesh.LivenessTimeout.D,
		// A peer may hold mesh.max_inflight_per_peer forwarded requests
		// here (more are refused with 429), each a stream, besides its
		// other streams.
		MaxStreams: cfg.Mesh.MaxInflightPerPeer + mesh.MaxStreamsPerPeer}
	for _, p := range cfg.Mesh.Peers {
		mc.Peers = append(mc.Peers, mesh.PeerConfig{Name: p.Name, Addr: p.Addr, Key: p.Key, Tier: p.Tier})
	}
	return mc
}

// forwarderLimits maps the mesh forwarder's limits: mesh.max_inflight_*
// and inference.limits.mesh_max_body_bytes.
func forwarderLimits(cfg *config.Config) meshproxy.Limits {
	return meshproxy.Limits{
		PerPeer: cfg.Mesh.MaxInflightPerPeer,
		Total:   cfg.Mesh.MaxInflightTotal,
		MaxBody: cfg.Inference.Limits.MeshMaxBodyBytes,
	}
}

// adminConfig maps the admin section.
func adminConfig(cfg *config.Config) admin.Config {
	return admin.Config{Listen: cfg.Admin.Listen, Pprof: cfg.Admin.Pprof}
}

// adopterConfig maps the inference section to the adopter's config. With
// inference.discover set, a discovered server serves the first role;
// discover replaces the runner's well-known candidates when not nil.
func adopterConfig(cfg *config.Config, discover []runner.DiscoverCandidate) runner.AdopterConfig {
	ac := runner.AdopterConfig{Interval: cfg.Inference.ProbeInterval.D, DiscoverCandidates: discover}
	if cfg.Inference.Discover && len(cfg.Inference.Roles) > 0 {
		ac.Discover, ac.DiscoverRole = true, cfg.Inference.Roles[0].Name
	}
	for _, in := range cfg.Inference.Instances {
		ac.Instances = append(ac.Instances, runner.AdoptedInstance{
			Role: in.Role, Kind: runner.Kind(in.Runtime), URL: in.URL, Model: in.Model,
		})
	}
	return ac
}

// adoptedSlots is the table as the Adopter's registrar: it registers the
// Adopter's instances as adopted ones, which a placed instance of the same
// role serves before.
type adoptedSlots struct{ t *table.Table }

var _ runner.Registrar = adoptedSlots{}

// RegisterLocal registers role as served by an adopted server at base.
func (a adoptedSlots) RegisterLocal(role, base, model, api, runtime string) (runner.LocalSlot, error) {
	s, err := a.t.RegisterLocal(table.OriginAdopted, role, base, model, api, runtime)
	if err != nil {
		return nil, err // not a nil *table.LocalSlot in a non-nil interface
	}
	return s, nil
}

// status assembles /v1/status from the components' own snapshots.
func (n *node) status() any {
	src := operator.StatusSources{
		NodeID: n.id.ID(), PublicKey: n.id.PublicKeyHex(), Version: buildVersion(), ConfigPath: n.cfgPath, Started: n.started,
		Config:     func() (*config.Config, string) { return n.config(), n.reloader.LastError() },
		Ready:      func() bool { ok, _ := n.admin.Ready(); return ok },
		Chain:      n.chain,
		Table:      n.table,
		Roles:      n.proxy,
		Host:       n.host,
		Instances:  n.adopter,
		Controller: n.router.ControllerStatus,
	}
	if n.mesh != nil {
		src.Mesh = n.mesh
	}
	return operator.NodeStatus(src, time.Now())
}
