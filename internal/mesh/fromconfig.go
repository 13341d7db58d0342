package mesh

import "github.com/nodeld/nodeld/internal/config"

// FromConfig maps the mesh section to the mesh's Config: the one mapping
// config check, run and a reload use. A peer may hold
// mesh.max_inflight_per_peer forwarded requests here (more are refused
// with 429), each a stream, besides its other streams.
func FromConfig(cfg *config.Config) Config {
	mc := Config{Listen: cfg.Mesh.Listen, Keepalive: cfg.Mesh.Keepalive.D, LivenessTimeout: cfg.Mesh.LivenessTimeout.D,
		MaxStreams: cfg.Mesh.MaxInflightPerPeer + MaxStreamsPerPeer}
	for _, p := range cfg.Mesh.Peers {
		mc.Peers = append(mc.Peers, PeerConfig{Name: p.Name, Addr: p.Addr, Key: p.Key, Tier: p.Tier})
	}
	return mc
}
