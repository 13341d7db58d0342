package main

import (
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/table"
)

// statusDoc is the /v1/status document. Later components add sections.
type statusDoc struct {
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
	Table     tableDoc         `json:"table"`
	Roles     []roleDoc        `json:"roles"`
	Instances []instanceDoc    `json:"instances"`
	Mesh      *meshDoc         `json:"mesh,omitempty"`
	Host      *host.HostStatus `json:"host,omitempty"`
	// Controller is present when this node runs the controller.
	Controller *operator.ControllerDoc `json:"controller,omitempty"`
}

// meshDoc is the mesh listener and every configured peer.
type meshDoc struct {
	Listen string    `json:"listen"`
	Peers  []peerDoc `json:"peers"`
}

// peerDoc is one configured peer as the mesh sees it.
type peerDoc struct {
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

// tableDoc is the placement table's part of the status.
type tableDoc struct {
	Generation uint64               `json:"generation"`
	Roles      []table.RoleSnapshot `json:"roles"`
	// Hosts are the peers' workload-host advertisements.
	Hosts []table.HostSnapshot `json:"hosts"`
}

// roleDoc is one configured role as an operator reads it.
type roleDoc struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`
	Resolved string `json:"resolved,omitempty"` // "local <base>" or "remote <node id>"; empty = 503
	// WaitingForLink: Resolved is a peer that restarted or stopped and has
	// not linked again; a request waits for its link (at most mesh.RestartLinkWait).
	WaitingForLink bool `json:"waiting_for_link,omitempty"`
	Inflight       int  `json:"inflight"`
	Concurrency    int  `json:"concurrency"`
	Exposed        bool `json:"exposed"`

	// OnDemand, with no route: the state (cold, starting, ...) of the
	// on-demand workload OnDemandFrom (a controller's node id) can start
	// for this node; a request is held for it, not refused.
	OnDemand     string `json:"on_demand,omitempty"`
	OnDemandFrom string `json:"on_demand_from,omitempty"`
}

// instanceDoc is one adopted instance, configured or discovered.
type instanceDoc struct {
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
