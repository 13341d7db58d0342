package mesh

import "time"

// PeerStatus is one configured peer as shown in /v1/status.
type PeerStatus struct {
	Name  string `json:"name,omitempty"`
	ID    string `json:"id,omitempty"`
	Addr  string `json:"addr"`
	State string `json:"state"`
	Tier  string `json:"tier,omitempty"`
	// Key is the pinned key (hex), when known.
	Key string `json:"key,omitempty"`
	// PinnedFrom is "config" or "tofu" once the key is known.
	PinnedFrom string `json:"pinned_from,omitempty"`
	// RTT is the link's smoothed round-trip time; 0 without a link.
	RTT time.Duration `json:"rtt_ns,omitempty"`
	// Since is when the current link came up.
	Since time.Time `json:"since,omitzero"`
	// LastError is the last dial, handshake or link error.
	LastError string `json:"last_error,omitempty"`
	// RefusedKey is a key seen at the peer's address that differs from
	// the pinned one: refused until the operator pins it in config.
	RefusedKey string `json:"refused_key,omitempty"`
}

// Status returns every configured peer, in configuration order.
func (m *Mesh) Status() []PeerStatus {
	m.mu.Lock()
	out := make([]PeerStatus, 0, len(m.cfg.Peers))
	var links []*link
	for _, pc := range m.cfg.Peers {
		p := m.peers[pc.Addr]
		if p == nil {
			continue
		}
		st := PeerStatus{
			Name: p.cfg.Name, ID: p.id, Addr: p.cfg.Addr, State: p.state, Tier: p.cfg.Tier,
			PinnedFrom: p.from, LastError: p.lastErr, RefusedKey: p.refusedKey,
		}
		if p.key != nil {
			st.Key = hexKey(p.key)
		}
		if p.link != nil {
			st.Since = p.link.up
		}
		out = append(out, st)
		links = append(links, p.link)
	}
	m.mu.Unlock()
	for i, l := range links {
		if l != nil {
			out[i].RTT = l.conn.ConnectionStats().SmoothedRTT
		}
	}
	return out
}
