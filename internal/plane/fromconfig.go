package plane

// The controller section of the node's config mapped onto the plane:
// its config, its targets (this node and mesh.peers), its publisher keys,
// and what config check notes about it.

import (
	"maps"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/pkg"
)

// StateFile is the controller's state file in node.data_dir.
const StateFile = "controller.json"

// TierTrust maps a config tier to the engine's trust tier
// (engine.ParseTrust: both take the words from grammar.TrustTiers); an
// unknown tier (config validation refuses it) is the lowest.
func TierTrust(tier string) engine.Trust {
	if t, ok := engine.ParseTrust(tier); ok {
		return t
	}
	return engine.TrustDiscovered
}

// ConfigOf maps the controller section onto the plane's config. ref
// resolves a node reference (a peer name, a node id, "self") to a node
// id, and returns what it cannot resolve as it is written (a peer pinned
// on first contact has no id until then; the next resolution, when it is
// pinned, finds it); nil keeps every reference as written (config check).
func ConfigOf(cfg *config.Config, ref func(string) string) Config {
	if ref == nil {
		ref = func(r string) string { return r }
	}
	cc := cfg.Controller
	c := Default()
	c.Tick, c.DeadAfter, c.RetryBackoff = cc.Tick.D, cc.DeadAfter.D, cc.RetryBackoff.D
	c.MaxReschedules, c.RescheduleWindow = cc.MaxReschedules, cc.RescheduleWindow.D
	c.SwapGrace = cc.SwapGrace.D
	c.DescribeTimeout, c.PlaceTimeout = cc.DescribeTimeout.D, cc.PlaceTimeout.D
	refs := func(in []string) []string {
		if len(in) == 0 {
			return nil
		}
		out := make([]string, len(in))
		for i, r := range in {
			out[i] = ref(r)
		}
		return out
	}
	if len(cc.Policy.Kinds) > 0 {
		c.Policy.Kinds = make(map[string]KindRule, len(cc.Policy.Kinds))
		for k, r := range cc.Policy.Kinds {
			c.Policy.Kinds[k] = KindRule{MinTier: TierTrust(r.MinTier)}
		}
	}
	c.Policy.DenyNodes = refs(cc.Policy.DenyNodes)
	c.Policy.DenyLabels = maps.Clone(cc.Policy.DenyLabels)
	for _, w := range cc.Workloads {
		pw := Workload{
			Name: w.Name, Package: w.Package, Version: w.Version, Variant: w.Variant,
			Prefer: refs(w.Prefer), Avoid: refs(w.Avoid), Replicas: w.Replicas,
			AllowEmulated: w.AllowEmulated,
		}
		if w.Node != "" {
			pw.Node = ref(w.Node)
		}
		if od := w.OnDemand; od.Enabled {
			pw.OnDemand = &OnDemand{IdleAfter: od.IdleAfter.D, MinResidency: od.MinResidency.D, MaxWait: od.MaxWait.D,
				DemandFrom: refs(od.DemandFrom), EvictCost: od.EvictCost}
		}
		c.Workloads = append(c.Workloads, pw)
	}
	return c
}

// AnchorKeys are the publisher keys the controller verifies packages
// against, as written, and the key that gave them:
// controller.trust_anchors, else host.trust_anchors.
func AnchorKeys(cfg *config.Config) (keys []string, key string) {
	if len(cfg.Controller.TrustAnchors) > 0 {
		return cfg.Controller.TrustAnchors, "controller.trust_anchors"
	}
	return cfg.Host.TrustAnchors, "host.trust_anchors"
}

// Anchors are AnchorKeys parsed.
func Anchors(cfg *config.Config) (pkg.Anchors, error) {
	keys, key := AnchorKeys(cfg)
	a, err := config.ParseKeys(key, keys)
	if err != nil {
		return nil, err
	}
	return pkg.Anchors(a), nil
}

// ConfigNotes are what config check says about a controller that will
// run but cannot place anything, besides the problems it refuses.
func ConfigNotes(cfg *config.Config) []string {
	cc := cfg.Controller
	if !cc.Enabled {
		return nil
	}
	var notes []string
	if len(cc.Policy.Kinds) == 0 {
		notes = append(notes, "controller.enabled with no controller.policy.kinds: nothing will be placed (governance is default deny; list the workload kinds it may place)")
	}
	if !cfg.Host.Enabled && len(cfg.Mesh.Peers) == 0 {
		notes = append(notes, "controller.enabled with no mesh.peers and host.enabled false: the controller has no node to place on")
	}
	if len(cc.TrustAnchors) == 0 && len(cfg.Host.TrustAnchors) == 0 {
		notes = append(notes, "controller.enabled with no controller.trust_anchors nor host.trust_anchors: no package verifies, so nothing will be placed")
	}
	return notes
}

// TargetsOf are the nodes cfg names as targets for node self: self when
// its host is enabled (tier pinned; never otherwise, even when mesh.peers
// names its key), and every other mesh peer whose key is known,
// configured or in pinned (the keys the mesh pinned on first contact, by
// peer address; tier from config: the key binds the tier, never the
// address). pinned nil means no mesh: then no peer is a target. A peer
// whose key is not known yet becomes a target once it is pinned
// (Controller.Refresh).
func TargetsOf(cfg *config.Config, self *identity.Identity, pinned map[string]string) []Target {
	var ts []Target
	seen := map[string]bool{}
	if cfg.Host.Enabled {
		ts = append(ts, Target{ID: self.ID(), Key: self.PublicKey(), Tier: engine.TrustPinned, Self: true})
		seen[self.ID()] = true
	}
	if pinned == nil {
		return ts
	}
	for _, p := range cfg.Mesh.Peers {
		k := p.Key
		if k == "" {
			k = pinned[p.Addr]
		}
		pub, err := config.ParseKey(k)
		if err != nil {
			continue // not known yet
		}
		id := identity.NodeID(pub)
		if seen[id] || id == self.ID() {
			// This node is a target only as itself, when its host is
			// enabled, whatever mesh.peers says.
			continue
		}
		seen[id] = true
		ts = append(ts, Target{ID: id, Key: pub, Tier: TierTrust(p.Tier)})
	}
	return ts
}
