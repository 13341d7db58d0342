package operator

import (
	"net"
	"time"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/table"
)

// StatusDoc is the /v1/status document, the node as an operator reads it.
type StatusDoc struct {
	NodeID        string  `json:"node_id"`
	Name          string  `json:"name,omitempty"`
	PublicKey     string  `json:"public_key"`
	Version       string  `json:"version"`
	StartedAt     string  `json:"started_at"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	Ready         bool    `json:"ready"`
	Chain         struct {
		Path    string `json:"path"`
		Entries uint64 `json:"entries"`
		Seq     uint64 `json:"seq"`
		Hash    string `json:"hash"`
	} `json:"chain"`
	Config struct {
		Path                 string `json:"path"`
		LastReloadSuccessful bool   `json:"last_reload_successful"`
		LastReloadError      string `json:"last_reload_error,omitempty"`
	} `json:"config"`
	Table     TableDoc         `json:"table"`
	Roles     []RoleDoc        `json:"roles"`
	Instances []InstanceDoc    `json:"instances"`
	Mesh      *MeshDoc         `json:"mesh,omitempty"`
	Host      *host.HostStatus `json:"host,omitempty"`
	// Controller is present when this node runs the controller.
	Controller *ControllerDoc `json:"controller,omitempty"`
}

// MeshDoc is the mesh listener and every configured peer.
type MeshDoc struct {
	Listen string    `json:"listen"`
	Peers  []PeerDoc `json:"peers"`
}

// PeerDoc is one configured peer as the mesh sees it.
type PeerDoc struct {
	Name       string  `json:"name,omitempty"`
	ID         string  `json:"id,omitempty"`
	Addr       string  `json:"addr"`
	State      string  `json:"state"`
	Tier       string  `json:"tier"`
	PinnedFrom string  `json:"pinned_from,omitempty"`
	RTTMillis  float64 `json:"rtt_ms"`
	LastError  string  `json:"last_error,omitempty"`
	RefusedKey string  `json:"refused_key,omitempty"`
}

// TableDoc is the placement table's part of the status.
type TableDoc struct {
	Generation uint64               `json:"generation"`
	Roles      []table.RoleSnapshot `json:"roles"`
	// Hosts are the peers' workload-host advertisements.
	Hosts []table.HostSnapshot `json:"hosts"`
}

// RoleDoc is one configured role as an operator reads it.
type RoleDoc struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`
	Resolved string `json:"resolved,omitempty"` // "local <base>" or "remote <node id>"; empty = 503
	// WaitingForLink: Resolved is a peer that restarted or stopped and has
	// not linked again; a request waits for its link (at most mesh.RestartLinkWait).
	WaitingForLink bool `json:"waiting_for_link,omitempty"`
	Inflight       int  `json:"inflight"`
	Concurrency    int  `json:"concurrency"`
	// Held counts the requests held for the role right now (waiting for
	// its route: on demand, or a server expected back).
	Held    int  `json:"held,omitempty"`
	Exposed bool `json:"exposed"`

	// OnDemand, with no route: the state (cold, starting, ...) of the
	// on-demand workload OnDemandFrom (a controller's node id) can start
	// for this node; a request is held for it, not refused.
	OnDemand     string `json:"on_demand,omitempty"`
	OnDemandFrom string `json:"on_demand_from,omitempty"`
}

// InstanceDoc is one adopted instance, configured or discovered.
type InstanceDoc struct {
	Role      string `json:"role"`
	Kind      string `json:"kind"`
	URL       string `json:"url"`
	Model     string `json:"model,omitempty"`
	Health    string `json:"health"`
	Serving   bool   `json:"serving"`
	LastProbe string `json:"last_probe,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Discovered marks an instance inference.discover found.
	Discovered bool `json:"discovered,omitempty"`
}

// StatusSources are the components /v1/status reads, each through the
// little it reads of it. The daemon fills them once; NodeStatus reads them
// on every request.
type StatusSources struct {
	NodeID, PublicKey, Version string
	ConfigPath                 string
	Started                    time.Time
	// Config is the config in force and the last reload's error ("": it
	// succeeded).
	Config func() (*config.Config, string)
	// Ready is the admin server's readiness.
	Ready func() bool
	Chain interface {
		Path() string
		Entries() uint64
		Head() (seq uint64, hash string)
	}
	Table interface{ Snapshot() table.Snapshot }
	// Roles are the role ports: bound address, in flight and capacity,
	// requests held.
	Roles interface {
		Addr(role string) (net.Addr, bool)
		Inflight(role string) (inflight, capacity int)
		Held(role string) int
	}
	// Mesh is nil without a mesh.
	Mesh interface {
		Addr() net.Addr
		Status() []mesh.PeerStatus
	}
	Host      interface{ Status() host.HostStatus }
	Instances interface {
		Status() []runner.InstanceStatus
	}
	// Controller is the controller's part (Router.ControllerStatus); nil
	// without a controller.
	Controller func() *ControllerDoc
}

// NodeStatus assembles the /v1/status document from src at now.
func NodeStatus(src StatusSources, now time.Time) *StatusDoc {
	cfg, lastErr := src.Config()
	var st StatusDoc
	st.NodeID = src.NodeID
	st.Name = cfg.Node.Name
	st.PublicKey = src.PublicKey
	st.Version = src.Version
	st.StartedAt = src.Started.UTC().Format(time.RFC3339)
	st.UptimeSeconds = now.Sub(src.Started).Seconds()
	st.Ready = src.Ready()
	st.Chain.Path = src.Chain.Path()
	st.Chain.Entries = src.Chain.Entries()
	st.Chain.Seq, st.Chain.Hash = src.Chain.Head()
	st.Config.Path = src.ConfigPath
	st.Config.LastReloadSuccessful = lastErr == ""
	st.Config.LastReloadError = lastErr

	snap := src.Table.Snapshot()
	st.Table = TableDoc{Generation: snap.Generation, Roles: snap.Roles, Hosts: snap.Hosts}
	byRole := make(map[string]table.RoleSnapshot, len(snap.Roles))
	for _, r := range snap.Roles {
		byRole[r.Role] = r
	}
	for _, r := range cfg.Inference.Roles {
		rd := RoleDoc{Name: r.Name, Listen: r.Listen, Exposed: r.Expose}
		if addr, ok := src.Roles.Addr(r.Name); ok {
			rd.Listen = addr.String()
		}
		rd.Inflight, rd.Concurrency = src.Roles.Inflight(r.Name)
		rd.Held = src.Roles.Held(r.Name)
		if rs, ok := byRole[r.Name]; ok && rs.Resolved != nil {
			switch rs.Resolved.Kind {
			case table.TargetLocal:
				rd.Resolved = "local " + rs.Resolved.Base
			case table.TargetRemote:
				rd.Resolved = "remote " + rs.Resolved.NodeID
				rd.WaitingForLink = rs.Resolved.WaitingForLink
			}
		}
		if rs, ok := byRole[r.Name]; ok && rd.Resolved == "" && len(rs.OnDemand) > 0 {
			rd.OnDemand, rd.OnDemandFrom = rs.OnDemand[0].State, rs.OnDemand[0].Controller
		}
		st.Roles = append(st.Roles, rd)
	}
	if src.Mesh != nil {
		st.Mesh = &MeshDoc{Listen: src.Mesh.Addr().String()}
		for _, p := range src.Mesh.Status() {
			st.Mesh.Peers = append(st.Mesh.Peers, PeerDoc{
				Name: p.Name, ID: p.ID, Addr: p.Addr, State: p.State, Tier: p.Tier, PinnedFrom: p.PinnedFrom,
				RTTMillis: float64(p.RTT.Microseconds()) / 1000, LastError: p.LastError, RefusedKey: p.RefusedKey,
			})
		}
	}
	hs := src.Host.Status()
	st.Host = &hs
	st.Controller = src.Controller() // nil without a controller
	for _, in := range src.Instances.Status() {
		d := InstanceDoc{
			Role: in.Role, Kind: in.Kind, URL: in.URL, Model: in.Model,
			Health: string(in.Health), Serving: in.Serving, LastError: in.LastError,
			Discovered: in.Discovered,
		}
		if !in.LastProbe.IsZero() {
			d.LastProbe = in.LastProbe.UTC().Format(time.RFC3339)
		}
		st.Instances = append(st.Instances, d)
	}
	return &st
}
