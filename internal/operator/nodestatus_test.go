package operator

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/table"
)

type statusChain struct{}

func (statusChain) Path() string           { return "/d/chain.log" }
func (statusChain) Entries() uint64        { return 7 }
func (statusChain) Head() (uint64, string) { return 6, "h6" }

type statusTable struct{ snap table.Snapshot }

func (s statusTable) Snapshot() table.Snapshot { return s.snap }

// statusRoles binds chat; embed is not bound.
type statusRoles struct{}

func (statusRoles) Addr(role string) (net.Addr, bool) {
	if role != "chat" {
		return nil, false
	}
	return net.TCPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:18001")), true
}
func (statusRoles) Inflight(role string) (int, int) { return len(role), 8 }
func (statusRoles) Held(role string) int            { return len(role) - 1 }

type statusMesh struct{}

func (statusMesh) Addr() net.Addr {
	return net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:7401"))
}
func (statusMesh) Status() []mesh.PeerStatus {
	return []mesh.PeerStatus{{Name: "b", ID: "n-b", Addr: "127.0.0.1:7402", State: "up", Tier: "paired", RTT: 1500 * time.Microsecond}}
}

type statusHost struct{}

func (statusHost) Status() host.HostStatus { return host.HostStatus{Enabled: true} }

type statusInstances struct{ at time.Time }

func (s statusInstances) Status() []runner.InstanceStatus {
	return []runner.InstanceStatus{{Role: "chat", Kind: "openai", URL: "http://127.0.0.1:8081", Health: "healthy", Serving: true, LastProbe: s.at}}
}

// NodeStatus: configured roles in config order with their bound address
// (or the configured one), in flight, and what the table resolves them
// to; the mesh's peers; no mesh section without a mesh.
func TestNodeStatus(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := &config.Config{}
	cfg.Node.Name = "a"
	cfg.Inference.Roles = []config.Role{{Name: "chat", Listen: "127.0.0.1:0", Expose: true}, {Name: "embed", Listen: "127.0.0.1:9"}}
	snap := table.Snapshot{Generation: 3, Roles: []table.RoleSnapshot{
		{Role: "chat", Resolved: &table.Target{Kind: table.TargetLocal, Base: "http://127.0.0.1:8081"}},
		{Role: "embed", Resolved: &table.Target{Kind: table.TargetRemote, NodeID: "n-b", WaitingForLink: true}},
	}}
	src := StatusSources{
		NodeID: "n-a", PublicKey: "ab", Version: "v1", ConfigPath: "/c.yaml", Started: started,
		Config:     func() (*config.Config, string) { return cfg, "bad key" },
		Ready:      func() bool { return true },
		Chain:      statusChain{},
		Table:      statusTable{snap},
		Roles:      statusRoles{},
		Mesh:       statusMesh{},
		Host:       statusHost{},
		Instances:  statusInstances{at: started},
		Controller: func() *ControllerDoc { return nil },
	}
	st := NodeStatus(src, started.Add(90*time.Second))
	if st.NodeID != "n-a" || st.Name != "a" || st.UptimeSeconds != 90 || st.StartedAt != "2026-01-02T03:04:05Z" || !st.Ready {
		t.Errorf("head: %+v", st)
	}
	if st.Chain.Entries != 7 || st.Chain.Seq != 6 || st.Chain.Hash != "h6" || st.Config.LastReloadSuccessful || st.Config.LastReloadError != "bad key" {
		t.Errorf("chain %+v config %+v", st.Chain, st.Config)
	}
	wantRoles := []RoleDoc{
		{Name: "chat", Listen: "127.0.0.1:18001", Resolved: "local http://127.0.0.1:8081", Inflight: 4, Concurrency: 8, Held: 3, Exposed: true},
		{Name: "embed", Listen: "127.0.0.1:9", Resolved: "remote n-b", WaitingForLink: true, Inflight: 5, Concurrency: 8, Held: 4},
	}
	if diff := cmp.Diff(wantRoles, st.Roles); diff != "" {
		t.Errorf("roles (-want +got):\n%s", diff)
	}
	wantMesh := &MeshDoc{Listen: "127.0.0.1:7401", Peers: []PeerDoc{{Name: "b", ID: "n-b", Addr: "127.0.0.1:7402", State: "up", Tier: "paired", RTTMillis: 1.5}}}
	if diff := cmp.Diff(wantMesh, st.Mesh); diff != "" {
		t.Errorf("mesh (-want +got):\n%s", diff)
	}
	if st.Host == nil || !st.Host.Enabled || st.Controller != nil || st.Table.Generation != 3 {
		t.Errorf("host %+v controller %+v table %d", st.Host, st.Controller, st.Table.Generation)
	}
	if len(st.Instances) != 1 || st.Instances[0].LastProbe != "2026-01-02T03:04:05Z" || st.Instances[0].Health != "healthy" {
		t.Errorf("instances %+v", st.Instances)
	}
	src.Mesh = nil
	if st := NodeStatus(src, started); st.Mesh != nil {
		t.Errorf("mesh section without a mesh: %+v", st.Mesh)
	}
}
