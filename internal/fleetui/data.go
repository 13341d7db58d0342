package fleetui

import (
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/operator"
)

// Data is what the page shows, as /ui/data answers it.
type Data struct {
	GeneratedAt time.Time `json:"generated_at"`
	Node        NodeData  `json:"node"`
	// Fleet is the controller's view; nil when this node runs none.
	Fleet *operator.FleetDoc `json:"fleet,omitempty"`
	// Activity are the latest requests through the role ports, newest
	// first; Rates the requests and tokens of the last seconds.
	Activity []activity.Request `json:"activity"`
	Rates    []activity.Second  `json:"rates"`
	// Names are the mesh peers' names by node id, for the page.
	Names map[string]string `json:"-"`
}

// NodeData is this node as the page shows it.
type NodeData struct {
	ID            string             `json:"id"`
	Name          string             `json:"name,omitempty"`
	Version       string             `json:"version"`
	Ready         bool               `json:"ready"`
	UptimeSeconds float64            `json:"uptime_seconds"`
	ChainSeq      uint64             `json:"chain_seq"`
	ChainHash     string             `json:"chain_hash"`
	Roles         []RoleData         `json:"roles"`
	Peers         []operator.PeerDoc `json:"peers"`
	// Instances are the instances placed on this node (its host).
	Instances []InstanceData `json:"instances"`
}

// RoleData is one role of this node and where it is served now.
type RoleData struct {
	operator.RoleDoc
	// Route is local, peer or none; Node and NodeName name the peer,
	// Base the local instance.
	Route    string `json:"route"`
	Node     string `json:"node,omitempty"`
	NodeName string `json:"node_name,omitempty"`
	Base     string `json:"base,omitempty"`
}

// InstanceData is one instance placed on this node.
type InstanceData struct {
	ID       string    `json:"id"`
	Package  string    `json:"package"`
	Version  string    `json:"version"`
	Variant  string    `json:"variant"`
	Role     string    `json:"role,omitempty"`
	State    string    `json:"state"`
	Since    time.Time `json:"since,omitzero"`
	Decision string    `json:"decision_id"`
}

// Route values of RoleData.
const (
	routeLocal = "local"
	routePeer  = "peer"
	routeNone  = "none"
)

func newData(st *operator.StatusDoc, fleet *operator.FleetDoc, now time.Time) *Data {
	d := &Data{GeneratedAt: now.UTC(), Fleet: fleet, Activity: []activity.Request{}, Rates: []activity.Second{}}
	n := &d.Node
	n.ID, n.Name, n.Version, n.Ready, n.UptimeSeconds = st.NodeID, st.Name, st.Version, st.Ready, st.UptimeSeconds
	n.ChainSeq, n.ChainHash = st.Chain.Seq, st.Chain.Hash
	names := map[string]string{}
	d.Names = names
	n.Peers = []operator.PeerDoc{}
	if st.Mesh != nil {
		n.Peers = st.Mesh.Peers
		for _, p := range st.Mesh.Peers {
			if p.ID != "" && p.Name != "" {
				names[p.ID] = p.Name
			}
		}
	}
	n.Roles = make([]RoleData, 0, len(st.Roles))
	for _, r := range st.Roles {
		rd := RoleData{RoleDoc: r, Route: routeNone}
		switch kind, rest, _ := strings.Cut(r.Resolved, " "); kind {
		case "local":
			rd.Route, rd.Base = routeLocal, rest
		case "remote":
			rd.Route, rd.Node, rd.NodeName = routePeer, rest, names[rest]
		}
		n.Roles = append(n.Roles, rd)
	}
	n.Instances = []InstanceData{}
	if st.Host != nil {
		for _, in := range st.Host.Instances {
			n.Instances = append(n.Instances, InstanceData{
				ID: in.ID, Package: in.Package, Version: in.Version, Variant: in.Variant, Role: in.Role,
				State: in.State, Since: in.Since, Decision: in.DecisionID,
			})
		}
	}
	return d
}
