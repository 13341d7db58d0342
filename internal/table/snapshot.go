package table

import (
	"maps"
	"slices"
)

// Snapshot is a consistent copy of the table for status pages
// (/v1/status). Admission in it was checked once, after the copy.
type Snapshot struct {
	// Generation is the generation the copy was taken at.
	Generation uint64 `json:"generation"`
	// Roles holds every role the table knows anything about, sorted.
	Roles []RoleSnapshot `json:"roles"`
	// Hosts lists the peers' workload-host advertisements, sorted by node
	// id, including the ones that no longer count (stale, not admitted).
	Hosts []HostSnapshot `json:"hosts"`
}

// RoleSnapshot is one role in a Snapshot.
type RoleSnapshot struct {
	Role string `json:"role"`
	// Local is the instance on this node that serves the role (the
	// elected registration), nil when there is none.
	Local *LocalSnapshot `json:"local,omitempty"`
	// Standby lists the role's other local registrations, in election
	// order: the first takes over when Local is released.
	Standby []LocalSnapshot `json:"standby,omitempty"`
	Exposed bool            `json:"exposed"`
	// ServeTo and UseFrom are the serving and consumer allowlists, sorted.
	ServeTo []string `json:"serve_to"`
	UseFrom []string `json:"use_from"`
	// Remote lists the received advertisements, sorted by node id,
	// including the ones that do not resolve now (stale, not allowed, not
	// admitted).
	Remote []RemoteSnapshot `json:"remote"`
	// Resolved is what Resolve returns at the snapshot, nil for nothing.
	Resolved *Target `json:"resolved,omitempty"`
	// ProxyPort is the loopback proxy port, 0 when none is registered.
	ProxyPort uint16 `json:"proxy_port,omitempty"`
	// OnDemand lists the controllers that can start the role for this
	// node (standby advertisements, standby.go), own first.
	OnDemand []StandbySnapshot `json:"on_demand,omitempty"`
}

// LocalSnapshot is a local instance in a Snapshot.
type LocalSnapshot struct {
	// Origin says who registered the instance.
	Origin  Origin `json:"origin"`
	Base    string `json:"base"`
	Model   string `json:"model,omitempty"`
	API     string `json:"api,omitempty"`
	Runtime string `json:"runtime,omitempty"`
}

// RemoteSnapshot is a received advertisement in a Snapshot.
type RemoteSnapshot struct {
	Node  string `json:"node"`
	Model string `json:"model,omitempty"`
	Load  string `json:"load,omitempty"`
	// Health is the advertised health, empty when not advertised.
	Health string `json:"health,omitempty"`
	// AgeSeconds is the time since local receipt.
	AgeSeconds float64 `json:"age_seconds"`
	Fresh      bool    `json:"fresh"`
	Allowed    bool    `json:"allowed"`
	Admitted   bool    `json:"admitted"`
	// WaitingForLink: the node restarted and this route is kept for a
	// moment while its new run links (KeepForRestart); it resolves only
	// when nothing live serves the role.
	WaitingForLink bool `json:"waiting_for_link,omitempty"`
	// LinkWaitOver: the wait for the node's link has passed; the route
	// no longer resolves and is about to be removed.
	LinkWaitOver bool `json:"link_wait_over,omitempty"`
}

// Snapshot returns a copy of the whole table.
func (t *Table) Snapshot() Snapshot {
	now := t.now()
	t.mu.RLock()
	roles := make(map[string]struct{})
	for _, keys := range [][]string{
		slices.Collect(maps.Keys(t.local)), slices.Collect(maps.Keys(t.remote)),
		slices.Collect(maps.Keys(t.allow)), slices.Collect(maps.Keys(t.serveAllow)),
		slices.Collect(maps.Keys(t.exposed)), slices.Collect(maps.Keys(t.proxyPorts)),
		t.standbyRolesLocked(),
	} {
		for _, k := range keys {
			roles[k] = struct{}{}
		}
	}
	s := Snapshot{Generation: t.gen, Roles: make([]RoleSnapshot, 0, len(roles))}
	cands := make([][]candidate, 0, len(roles))
	for _, role := range slices.Sorted(maps.Keys(roles)) {
		rs := RoleSnapshot{
			Role:      role,
			ServeTo:   sortedMembers(t.serveAllow[role]),
			UseFrom:   sortedMembers(t.allow[role]),
			Remote:    []RemoteSnapshot{},
			ProxyPort: t.proxyPorts[role],
			OnDemand:  t.standbySnapshotLocked(role, now),
		}
		_, rs.Exposed = t.exposed[role]
		var cs []candidate
		if slots := t.electionOrderLocked(role); len(slots) > 0 {
			l := slots[0].entry
			rs.Local = &LocalSnapshot{Origin: slots[0].origin, Base: l.base, Model: l.model, API: l.api, Runtime: l.runtime}
			for _, o := range slots[1:] {
				rs.Standby = append(rs.Standby, LocalSnapshot{Origin: o.origin, Base: o.entry.base,
					Model: o.entry.model, API: o.entry.api, Runtime: o.entry.runtime})
			}
			rs.Resolved = &Target{Kind: TargetLocal, Base: l.base, Model: l.model, Runtime: l.runtime}
		} else {
			cs = t.candidatesLocked(role, now)
		}
		var per map[string]int
		var entries []remoteEntry
		if ra := t.remote[role]; ra != nil {
			per, entries = ra.index, ra.entries
		}
		for _, node := range slices.Sorted(maps.Keys(per)) {
			e := entries[per[node]]
			waiting, over := t.waitingLocked(node, now)
			rs.Remote = append(rs.Remote, RemoteSnapshot{
				Node:       node,
				Model:      e.ad.Metadata[MetaModel],
				Load:       e.ad.Metadata[MetaLoad],
				Health:     e.ad.Metadata[MetaHealth],
				AgeSeconds: now.Sub(e.received).Seconds(),
				Fresh:      t.fresh(e, now),
				Allowed:    hasMember(t.allow, role, node),

				WaitingForLink: waiting,
				LinkWaitOver:   over,
			})
		}
		s.Roles = append(s.Roles, rs)
		cands = append(cands, cs)
	}
	s.Hosts = t.hostsSnapshotLocked(now)
	t.mu.RUnlock()

	// Admission is the mesh's and is asked without mu held.
	for i := range s.Hosts {
		s.Hosts[i].Admitted = t.admit != nil && t.admit.IsAdmitted(s.Hosts[i].Node)
	}
	for i := range s.Roles {
		rs := &s.Roles[i]
		for j := range rs.Remote {
			rs.Remote[j].Admitted = t.admit != nil && t.admit.IsAdmitted(rs.Remote[j].Node)
		}
		t.fillStandbyAdmission(rs)
		if rs.Resolved == nil {
			if tg, ok := t.pickAdmitted(cands[i]); ok {
				rs.Resolved = &tg
			}
		}
	}
	return s
}
