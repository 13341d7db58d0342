package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/zap/zapcore"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/table"
)

// reloadBase is the config the reload tests start from (%s: data dir):
// role chat on a free port, a label, a mesh with one peer that never
// answers.
const reloadBase = `node:
  name: r
  data_dir: %s
  labels: {rack: a}
log: {level: info, format: json}
admin: {listen: "127.0.0.1:0"}
mesh:
  listen: "127.0.0.1:0"
  peers:
    - {name: p, addr: "127.0.0.1:9", tier: paired}
inference:
  roles:
    - {name: chat, listen: "127.0.0.1:0"}
`

// nodeState is what a refused reload must leave as it was, read from
// every component.
type nodeState struct {
	Cfg         *config.Config
	Roles       map[string]string // proxy role -> bound address
	ChatCap     int
	Level       zapcore.Level
	Advert      map[string]string // the host's advertisement metadata
	FactsLabels map[string]string
	Peers       []string // name@addr/tier
	MeshCap     int
	Instances   []runner.InstanceStatus
	Policy      []table.RoleSnapshot
}

func (tn *testNode) state() nodeState {
	tn.t.Helper()
	n := tn.n
	st := nodeState{Cfg: n.config(), Roles: map[string]string{}, Level: n.level.Level(), Instances: n.adopter.Status()}
	for _, r := range []string{"chat", "embed", "_chat2", "busy"} {
		if a, ok := n.proxy.Addr(r); ok {
			st.Roles[r] = a.String()
		}
	}
	_, st.ChatCap = n.proxy.Inflight("chat")
	st.Advert = n.host.Advertisement(n.started).Metadata
	f, err := n.facts.Facts(context.Background())
	if err != nil {
		tn.t.Fatal(err)
	}
	st.FactsLabels = f.Labels
	if n.mesh != nil {
		for _, p := range n.mesh.Status() {
			st.Peers = append(st.Peers, p.Name+"@"+p.Addr+"/"+p.Tier)
		}
		_, st.MeshCap = n.forwarder.Inflight()
	}
	for _, r := range n.table.Snapshot().Roles {
		st.Policy = append(st.Policy, table.RoleSnapshot{Role: r.Role, Exposed: r.Exposed, ServeTo: r.ServeTo, UseFrom: r.UseFrom, ProxyPort: r.ProxyPort})
	}
	return st
}

// sameState fails the test if any component's state differs, or the
// config in force is not the same one.
func sameState(t *testing.T, before, after nodeState) {
	t.Helper()
	if before.Cfg != after.Cfg {
		t.Error("another config is in force")
	}
	if diff := cmp.Diff(before, after, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(nodeState{}, "Cfg")); diff != "" {
		t.Errorf("state changed (-before +after):\n%s", diff)
	}
}

// TestReloadIsAllOrNothing: each reload below changes many things (a new
// role on a free port, the labels, the log level, a new peer, the
// forwarding limits) and has one thing some component refuses. Each must
// be refused with the gauge at 0, a chained refusal naming the problem,
// and every component exactly as before: the new port not bound, the old
// role still served.
func TestReloadIsAllOrNothing(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tn := startNode(t, reloadBase, nil)
	selfKey := tn.n.id.PublicKeyHex()

	// next is reloadBase with everything changed; embedAddr is the new
	// role's port.
	next := func(embedAddr string) string {
		cfg := strings.Replace(reloadBase, "{rack: a}", "{rack: b}", 1)
		cfg = strings.Replace(cfg, "level: info", "level: debug", 1)
		cfg = strings.Replace(cfg, "    - {name: p, addr: \"127.0.0.1:9\", tier: paired}\n",
			"    - {name: p, addr: \"127.0.0.1:9\", tier: paired}\n    - {name: q, addr: \"127.0.0.1:10\", tier: pinned}\n", 1)
		cfg = strings.Replace(cfg, "mesh:\n", "mesh:\n  max_inflight_total: 32\n", 1)
		return cfg + "    - {name: embed, listen: \"" + embedAddr + "\"}\n"
	}
	tests := []struct {
		name    string
		bad     func(cfg string) string // adds the one bad part to next()
		wantErr string
	}{
		{
			"a port in use",
			func(c string) string { return c + "    - {name: busy, listen: \"" + busy.Addr().String() + "\"}\n" },
			"address already in use",
		},
		{
			"a label the host refuses",
			func(c string) string { return strings.Replace(c, "{rack: b}", "{rack: b, tier: pinned}", 1) },
			"would assert trust",
		},
		{
			"this node's own key as a peer",
			func(c string) string {
				return strings.Replace(c, "tier: pinned}", "tier: pinned, key: "+selfKey+"}", 1)
			},
			"this node's own key",
		},
		{
			// Within the config's bound (65536), beyond the forwarder's.
			"forwarding limits beyond the forwarder's",
			func(c string) string {
				return strings.Replace(c, "max_inflight_total: 32", "max_inflight_total: 5000", 1)
			},
			"mesh max in-flight total",
		},
		{
			"an instance URL the runner refuses",
			func(c string) string {
				return c + "  instances:\n    - {role: chat, runtime: openai, url: \"http://127.0.0.1:8080/v1\"}\n"
			},
			"inference.instances[0].url",
		},
		{
			// The refusal names them as config.RestartOnly declares them.
			"keys that change only with a restart",
			func(c string) string {
				c = strings.Replace(c, "format: json", "format: console", 1)
				return strings.Replace(c, "  listen: \"127.0.0.1:0\"\n  peers:", "  listen: \"127.0.0.2:0\"\n  peers:", 1)
			},
			config.Diff{Restart: []string{"log.format", "mesh.listen"}}.RestartError().Error(),
		},
		{
			"a role the table refuses",
			func(c string) string { return c + "    - {name: _chat2, listen: \"127.0.0.1:0\"}\n" },
			`"_chat2" is not a valid role name`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			embedAddr := freeAddr(t)
			before := tn.state()
			tn.rewrite(tt.bad(next(embedAddr)))
			tn.n.reloader.Reload()

			if g := tn.reloadGauge(); g != 0 {
				t.Errorf("reload gauge = %v, want 0", g)
			}
			st := tn.n.status().(*operator.StatusDoc)
			if st.Config.LastReloadSuccessful || !strings.Contains(st.Config.LastReloadError, tt.wantErr) {
				t.Errorf("status config = %+v, want a refusal mentioning %q", st.Config, tt.wantErr)
			}
			kind, payload := tn.lastChainEntry()
			if msg, _ := payload["error"].(string); kind != "config.reload" || payload["ok"] != false || !strings.Contains(msg, tt.wantErr) {
				t.Errorf("last chain entry = %s %v, want a refused config.reload mentioning %q", kind, payload, tt.wantErr)
			}
			sameState(t, before, tn.state())
			mustBeFree(t, embedAddr)
			if code, body := httpGet(t, "http://"+before.Roles["chat"]+"/v1/models"); code != 503 || !strings.Contains(body, "no instance serves role 'chat'") {
				t.Errorf("chat after the refused reload = %d %q, want it served (503, no instance)", code, body)
			}
		})
	}

	// The same changes without the bad part go through, all of them.
	embedAddr := freeAddr(t)
	before := tn.state()
	seq1 := signedSeq(t, tn)
	tn.rewrite(next(embedAddr))
	tn.n.reloader.Reload()
	if g := tn.reloadGauge(); g != 1 {
		t.Fatalf("reload gauge = %v after a good reload, want 1; status %+v", g, tn.n.status().(*operator.StatusDoc).Config)
	}
	after := tn.state()
	if after.Roles["embed"] != embedAddr || after.Roles["chat"] != before.Roles["chat"] {
		t.Errorf("roles after the reload = %v, want chat unmoved and embed on %s", after.Roles, embedAddr)
	}
	if after.Level != zapcore.DebugLevel || after.Advert["label.rack"] != "b" || after.FactsLabels["rack"] != "b" || after.MeshCap != 32 || len(after.Peers) != 2 {
		t.Errorf("state after the reload = %+v, want debug, rack b in the advertisement and facts, 32 slots, 2 peers", after)
	}
	signed, seq2 := signedFacts(t, tn)
	if signed.Labels["rack"] != "b" || seq2 <= seq1 {
		t.Errorf("signed facts after the reload: labels %v seq %d, want rack b and a seq above %d", signed.Labels, seq2, seq1)
	}
	if kind, payload := tn.lastChainEntry(); kind != "config.reload" || payload["ok"] != true {
		t.Errorf("last chain entry = %s %v, want config.reload ok", kind, payload)
	}
}

// signedFacts are the node's facts as the host signs them for describe,
// verified, and their seq.
func signedFacts(t *testing.T, tn *testNode) (facts.Facts, uint64) {
	t.Helper()
	s, err := tn.n.facts.Signed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f, meta, err := facts.Verify(s, tn.n.id.PublicKey(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return f, meta.Seq
}

func signedSeq(t *testing.T, tn *testNode) uint64 {
	t.Helper()
	_, seq := signedFacts(t, tn)
	return seq
}

// TestReloadChainFailureAborts: a reload whose chain record cannot be
// written is not taken: the new port is closed again and nothing changed.
func TestReloadChainFailureAborts(t *testing.T) {
	t.Parallel()
	tn := startNode(t, reloadBase, nil)
	before := tn.state()
	embedAddr := freeAddr(t)
	tn.rewrite(reloadBase + `    - {name: embed, listen: "` + embedAddr + `"}` + "\n")
	if err := tn.chain.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tn.n.reloader.Reload(); err == nil || !strings.Contains(err.Error(), "chain config.reload") {
		t.Fatalf("applyReload with a closed chain = %v, want the chain's error", err)
	}
	sameState(t, before, tn.state())
	mustBeFree(t, embedAddr)
}
