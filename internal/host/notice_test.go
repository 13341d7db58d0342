package host

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/table"
)

// The notice tests set up their own nodes (a mesh and a host each) rather
// than use the shared helpers.

const ntTimeout = 20 * time.Second

func ntWait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(ntTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// ntAudit records chain entries in memory.
type ntAudit struct {
	mu   sync.Mutex
	recs []struct {
		kind    string
		payload map[string]any
	}
}

func (a *ntAudit) Record(_, kind string, payload any) error {
	m, _ := payload.(map[string]any)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, struct {
		kind    string
		payload map[string]any
	}{kind, m})
	return nil
}

func (a *ntAudit) Head() (uint64, string) { return 0, "" }

func (a *ntAudit) of(kind string) []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []map[string]any
	for _, r := range a.recs {
		if r.kind == kind {
			out = append(out, r.payload)
		}
	}
	return out
}

// ntNode is one node: identity, mesh and host.
type ntNode struct {
	t     *testing.T
	name  string
	ident *identity.Identity
	dir   string
	addr  string
	m     *mesh.Mesh
	h     *Host
	rev   *pkg.Revocations
	audit *ntAudit
	peers []mesh.PeerConfig
}

func ntNewNode(t *testing.T, name string) *ntNode {
	t.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().String()
	_ = c.Close()
	return &ntNode{t: t, name: name, ident: id, dir: t.TempDir(), addr: addr, audit: &ntAudit{}}
}

func (n *ntNode) peerCfg() mesh.PeerConfig {
	return mesh.PeerConfig{Name: n.name, Addr: n.addr, Key: n.ident.PublicKeyHex(), Tier: mesh.TierPaired}
}

func (n *ntNode) meshCfg() mesh.Config {
	return mesh.Config{Listen: n.addr, Keepalive: time.Second, Peers: n.peers}
}

// start builds and runs n's mesh and host with controllers.
func (n *ntNode) start(controllers ...*ntNode) {
	t := n.t
	t.Helper()
	log := zaptest.NewLogger(t).Named(n.name)
	tbl := table.New(n.ident.ID(), table.Options{})
	m, err := mesh.New(n.meshCfg(), mesh.Deps{
		Identity: n.ident, DataDir: n.dir, Table: tbl, PeerEvents: tbl.ApplyPeerEvent, Logger: log,
		OnLinkUp: func(ctx context.Context, p mesh.PeerInfo) { n.h.ReplayNotices(ctx, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	n.m = m
	rev, err := pkg.OpenRevocations(filepath.Join(n.dir, pkg.RevocationsFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	n.rev = rev
	var keys []ed25519.PublicKey
	for _, c := range controllers {
		keys = append(keys, c.ident.PublicKey())
	}
	h, err := New(Config{Enabled: true, Controllers: keys, DataDir: n.dir},
		Deps{Identity: n.ident, Mesh: m, Audit: n.audit, Recorder: passRecorder{n.audit}, Revocations: rev, Logger: log.Named("host"),
			Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	n.h = h
	h.Register()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mesh %s: %v", n.name, err)
		}
	})
}

// ntLink links two running nodes by one dial (b's), so no duplicate link
// is settled under a test: a's first dial is refused by b, which does not
// know a yet, and a backs off while b dials.
func ntLink(t *testing.T, a, b *ntNode) {
	t.Helper()
	a.peers = append(a.peers, b.peerCfg())
	if err := a.m.ApplyConfig(a.meshCfg()); err != nil {
		t.Fatal(err)
	}
	ntWait(t, b.name+" refusing "+a.name, func() bool {
		for _, st := range a.m.Status() {
			if st.ID == b.ident.ID() && st.LastError != "" {
				return true
			}
		}
		return false
	})
	b.peers = append(b.peers, a.peerCfg())
	if err := b.m.ApplyConfig(b.meshCfg()); err != nil {
		t.Fatal(err)
	}
	ntWaitLinked(t, a, b)
}

func (n *ntNode) linked(peer *ntNode) bool {
	for _, p := range n.m.LinkedPeers() {
		if p.ID == peer.ident.ID() {
			return true
		}
	}
	return false
}

func ntWaitLinked(t *testing.T, a, b *ntNode) {
	t.Helper()
	ntWait(t, a.name+"-"+b.name+" link", func() bool { return a.linked(b) && b.linked(a) })
}

func (n *ntNode) revoked(value string) bool {
	_, ok := n.rev.IsRevoked(pkg.SubjectPackage, value)
	return ok
}

func (n *ntNode) sign(seq uint64, action, value string) []byte {
	n.t.Helper()
	raw, err := pkg.SignNotice(n.ident.PrivateKey(), pkg.Notice{Seq: seq, IssuedAt: time.Now(), Action: action,
		Subject: pkg.Subject{Kind: pkg.SubjectPackage, Value: value, Reason: "test"}})
	if err != nil {
		n.t.Fatal(err)
	}
	return raw
}

// logged returns the notices in n's replay log.
func (n *ntNode) logged() [][]byte {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join(n.dir, NoticesFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		n.t.Fatal(err)
	}
	raws, err := decodeNoticeLog(data)
	if err != nil {
		n.t.Fatal(err)
	}
	return raws
}

func TestNoticeGossipReplayAndLift(t *testing.T) {
	a, b, c, d := ntNewNode(t, "a"), ntNewNode(t, "b"), ntNewNode(t, "c"), ntNewNode(t, "d")
	// a - b - c, b - d: a is not linked to c; d does not take a's notices.
	a.start()
	b.start(a)
	c.start(a)
	d.start()
	ntLink(t, a, b)
	ntLink(t, b, c)
	ntLink(t, b, d)

	ctx, cancel := context.WithTimeout(context.Background(), ntTimeout)
	defer cancel()
	revoke := a.sign(1, pkg.NoticeRevoke, "evil")
	if err := a.h.SubmitNotice(ctx, revoke); err != nil {
		t.Fatal(err)
	}
	if !a.revoked("evil") {
		t.Fatal("a's own notice not applied on a")
	}
	ntWait(t, "b and c revoke evil", func() bool { return b.revoked("evil") && c.revoked("evil") })
	ntWait(t, "d refuses the notice", func() bool { return len(d.audit.of(KindNoticeRefused)) > 0 })
	if d.revoked("evil") {
		t.Error("d applied a notice of a key that is not its controller")
	}
	ref := d.audit.of(KindNoticeRefused)[0]
	if ref["code"] != pkg.CodeUntrustedSigner || ref["from"] != b.ident.ID() {
		t.Errorf("d's refusal = %v", ref)
	}
	// c got it from b (gossip).
	ntWait(t, "c chains the notice", func() bool { return len(c.audit.of(KindNoticeApplied)) == 1 })
	got := c.audit.of(KindNoticeApplied)[0]
	if got["from"] != b.ident.ID() || got["issuer"] != a.ident.ID() || got["action"] != pkg.NoticeRevoke {
		t.Errorf("c's applied record = %v", got)
	}
	for _, n := range []*ntNode{a, b, c} {
		if diff := cmp.Diff([][]byte{revoke}, n.logged()); diff != "" {
			t.Errorf("%s's log (-want +got):\n%s", n.name, diff)
		}
		fi, err := os.Stat(filepath.Join(n.dir, NoticesFile))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s's log mode: %v %v", n.name, fi.Mode(), err)
		}
	}

	// A replayed old notice changes nothing and is not chained again.
	if err := a.h.SubmitNotice(ctx, revoke); !errors.Is(err, pkg.ErrStaleNotice) {
		t.Errorf("resubmit: %v, want stale", err)
	}
	if err := a.h.notes.send(ctx, b.ident.ID(), revoke); err != nil {
		t.Fatal(err)
	}
	if n := len(b.audit.of(KindNoticeApplied)); n != 1 {
		t.Errorf("b chained %d applied notices, want 1", n)
	}

	// A node that joins later gets the notice by replay from c.
	e := ntNewNode(t, "e")
	e.start(a)
	ntLink(t, c, e)
	ntWait(t, "e revokes evil by replay", func() bool { return e.revoked("evil") })

	// Lifting it reaches every node and replaces the revoke in the logs.
	unrevoke := a.sign(2, pkg.NoticeUnrevoke, "evil")
	if err := a.h.SubmitNotice(ctx, unrevoke); err != nil {
		t.Fatal(err)
	}
	ntWait(t, "evil lifted everywhere", func() bool {
		return !a.revoked("evil") && !b.revoked("evil") && !c.revoked("evil") && !e.revoked("evil")
	})
	for _, n := range []*ntNode{a, b, c, e} {
		ntWait(t, n.name+"'s log", func() bool { l := n.logged(); return len(l) == 1 && bytes.Equal(l[0], unrevoke) })
	}
}

func TestNoticeLogLoadKeepsOnlyVerified(t *testing.T) {
	a, b, stranger := ntNewNode(t, "a"), ntNewNode(t, "b"), ntNewNode(t, "x")
	good := a.sign(5, pkg.NoticeRevoke, "bad-pkg")
	alien := stranger.sign(1, pkg.NoticeRevoke, "other")
	log := base64.StdEncoding.EncodeToString(good) + "\n" + base64.StdEncoding.EncodeToString(alien) + "\n"
	if err := os.WriteFile(filepath.Join(b.dir, NoticesFile), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	b.start(a)
	if !b.revoked("bad-pkg") {
		t.Error("logged notice not applied at start")
	}
	if b.revoked("other") {
		t.Error("notice of a stranger applied at start")
	}
	if diff := cmp.Diff([][]byte{good}, b.logged()); diff != "" {
		t.Errorf("log after load (-want +got):\n%s", diff)
	}
}

func TestAddNoticeEntryBound(t *testing.T) {
	var entries []noticeEntry
	for i := range MaxNoticeLog + 3 {
		entries = addNoticeEntry(entries, pkg.Notice{Raw: []byte{byte(i)},
			Subject: pkg.Subject{Kind: pkg.SubjectPackage, Value: string(rune('a'+i%26)) + string(rune(i))}})
	}
	if len(entries) != MaxNoticeLog || entries[0].raw[0] != 3 {
		t.Errorf("len %d, first %v", len(entries), entries[0].raw)
	}
}

func FuzzDecodeNoticeLog(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("eyJwYXlsb2FkIjoiIn0=\n\n"))
	f.Add([]byte("not base64\n"))
	f.Add(bytes.Repeat([]byte("QUFB\n"), MaxNoticeLog+1))
	f.Fuzz(func(t *testing.T, data []byte) {
		raws, err := decodeNoticeLog(data)
		if err != nil {
			return
		}
		if len(raws) > MaxNoticeLog {
			t.Fatalf("%d notices", len(raws))
		}
		for _, r := range raws {
			if len(r) > pkg.MaxNoticeBytes {
				t.Fatalf("notice of %d bytes", len(r))
			}
		}
	})
}

func TestNoticeTearsDownRunningInstance(t *testing.T) {
	// Uses the package's cluster builder (a host running a placed echo
	// instance); the notice is this node's own, submitted locally.
	c := newCluster(t, clusterOpts{})
	p := buildEcho(t, c.publisher)
	res, _, err := c.place(t, p, true)
	if err != nil {
		t.Fatalf("place: %v", err)
	}
	raw, err := pkg.SignNotice(c.h.self.PrivateKey(), pkg.Notice{Seq: 1, IssuedAt: time.Now(), Action: pkg.NoticeRevoke,
		Subject: pkg.Subject{Kind: pkg.SubjectPackage, Value: p.m.ID, Reason: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ntTimeout)
	defer cancel()
	if err := c.h.SubmitNotice(ctx, raw); err != nil {
		t.Fatal(err)
	}
	// The record follows the instance's removal from the list.
	ntWait(t, "teardown", func() bool {
		return c.instance(res.InstanceID) == nil && len(c.audit.ofKind(KindRevokedTeardown)) > 0
	})
	recs := c.audit.ofKind(KindRevokedTeardown)
	if len(recs) != 1 || recs[0]["unloaded"] != true || recs[0]["instance_id"] != res.InstanceID {
		t.Errorf("teardown records = %v", recs)
	}
	if got := c.audit.ofKind(KindNoticeApplied); len(got) != 1 || got[0]["from"] != "local" {
		t.Errorf("applied records = %v", got)
	}
}
