package plane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// fakeStore is a package store over the fake cluster's package dirs.
type fakeStore struct {
	mu   sync.Mutex // guards pkgs
	pkgs map[string]map[string]string
}

func (s *fakeStore) Resolve(id, version string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.pkgs[id]
	if version == "" {
		newest, ok := pkg.NewestVersion(slicesKeys(vs))
		if !ok {
			return "", "", fmt.Errorf("store has no %s: %w", id, pkg.ErrNotInStore)
		}
		version = newest
	}
	dir, ok := vs[version]
	if !ok {
		return "", "", fmt.Errorf("store has no %s %s: %w", id, version, pkg.ErrNotInStore)
	}
	return dir, version, nil
}

func slicesKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// addVersion registers package id at version (kind service, memGiB of
// memory, edited by mod) in the cluster and the store, and returns its
// dir.
func (r *rig) addVersion(id, version string, memGiB uint64, mod func(*pkg.Manifest)) string {
	r.t.Helper()
	dir := "/store/" + id + "/" + version
	m := &pkg.Manifest{Schema: 1, ID: id, Version: version, Kind: pkg.KindService, Runtime: pkg.Runtime{Type: "process"},
		Variants: []pkg.Variant{{Name: "cpu", Resources: pkg.Resources{MemBytes: memGiB << 30}}}}
	if mod != nil {
		mod(m)
	}
	r.cl.Mu.Lock()
	r.cl.Pkgs[dir] = &pkg.Verified{Manifest: m, ManifestHash: pkg.ManifestHash([]byte(id + " " + version))}
	r.cl.Mu.Unlock()
	st, ok := r.store.(*fakeStore)
	if !ok {
		st = &fakeStore{pkgs: map[string]map[string]string{}}
		r.store = st
	}
	st.mu.Lock()
	if st.pkgs[id] == nil {
		st.pkgs[id] = map[string]string{}
	}
	st.pkgs[id][version] = dir
	st.mu.Unlock()
	return dir
}

// declare sets the declared workloads and restarts the controller with
// them (as a config load would), or applies them live when live is set.
func (r *rig) declare(live bool, ws ...Workload) {
	r.t.Helper()
	r.cfg.Workloads = ws
	if !live {
		r.restart()
		return
	}
	if err := r.c.ApplyConfig(r.cfg); err != nil {
		r.t.Fatal(err)
	}
}

// copy is one instance on a fake host.
type copyOf struct {
	node, iid, version, state string
	down                      bool
}

// instancesOf returns the instances of declared workload name on every
// host, sorted by node.
func (r *rig) instancesOf(name string) []copyOf {
	r.cl.Mu.Lock()
	defer r.cl.Mu.Unlock()
	var out []copyOf
	for _, h := range r.cl.Hosts {
		for iid, in := range h.Instances {
			if m := h.Meta[iid]; m.Workload == name {
				out = append(out, copyOf{node: h.ID, iid: iid, version: m.Version, state: in.Lifecycle, down: h.Down})
			}
		}
	}
	slices.SortFunc(out, func(a, b copyOf) int { return strings.Compare(a.node+a.iid, b.node+b.iid) })
	return out
}

// liveOf returns the instances of name on hosts that are not killed.
func (r *rig) liveOf(name string) []copyOf {
	return slices.DeleteFunc(r.instancesOf(name), func(c copyOf) bool { return c.down })
}

func nodesOf(cs []copyOf) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.node)
	}
	return out
}

func distinct(ss []string) bool {
	seen := map[string]bool{}
	for _, s := range ss {
		if seen[s] {
			return false
		}
		seen[s] = true
	}
	return true
}

// placeCalls counts the place calls made so far.
func (r *rig) placeCalls() int {
	r.cl.Mu.Lock()
	defer r.cl.Mu.Unlock()
	n := 0
	for _, c := range r.cl.Calls {
		if strings.HasPrefix(c, "place ") {
			n++
		}
	}
	return n
}

// refusals returns the chained declared-workload refusals of name.
func (r *rig) refusals(name string) []refuseRecord {
	r.t.Helper()
	var out []refuseRecord
	for _, e := range r.entries(KindRefuse) {
		var rec refuseRecord
		if err := json.Unmarshal(e.Payload, &rec); err != nil {
			r.t.Fatal(err)
		}
		if rec.Phase == "declared" && rec.Workload == name {
			out = append(out, rec)
		}
	}
	return out
}

func (r *rig) declaredPlacements(name string) []Placement {
	var out []Placement
	for _, p := range r.c.Placements() {
		if p.Declared == name {
			out = append(out, p)
		}
	}
	return out
}

var chat = Workload{Name: "chat", Package: "echo"}

func TestDeclaredReplicasOnDistinctNodes(t *testing.T) {
	r, _, _, _ := declaredChat(t, 2)
	cs := r.liveOf("chat")
	if len(cs) != 2 || !distinct(nodesOf(cs)) {
		t.Fatalf("instances %+v, want 2 on distinct nodes", cs)
	}
	ps := r.declaredPlacements("chat")
	replicas := []int{}
	for _, p := range ps {
		replicas = append(replicas, p.Replica)
		if p.Order == nil || p.Order.Config.Workload != "chat" || p.Life != LifePlaced {
			t.Errorf("placement %+v", p)
		}
	}
	slices.Sort(replicas)
	if !slices.Equal(replicas, []int{0, 1}) {
		t.Errorf("replicas %v", replicas)
	}
	// Settled: later ticks place nothing.
	calls := r.placeCalls()
	for range 5 {
		r.step()
	}
	if n := r.placeCalls(); n != calls {
		t.Errorf("%d more place calls once settled", n-calls)
	}
}

// TestTwoWorkloadsOfOnePackageOnOneNode: the workload name is part of the
// instance config, so both get their own instance id on the one node.
func TestTwoWorkloadsOfOnePackageOnOneNode(t *testing.T) {
	r, hs := newRig(t, 8)
	r.addVersion("echo", "1.0.0", 1, nil)
	r.declare(false, Workload{Name: "a", Package: "echo"}, Workload{Name: "b", Package: "echo"})
	r.tick()
	a, b := r.liveOf("a"), r.liveOf("b")
	if len(a) != 1 || len(b) != 1 || a[0].node != hs[0].ID || b[0].node != hs[0].ID || a[0].iid == b[0].iid {
		t.Fatalf("a %+v, b %+v", a, b)
	}
}

// TestReplicasNeverShareANode: with fewer nodes than replicas, the extra
// replica is unplaceable, chained once (not every tick) and retried with
// the backoff; a new node takes it.
func TestReplicasNeverShareANode(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	r.addVersion("echo", "1.0.0", 1, nil)
	w := chat
	w.Replicas = 3
	r.declare(false, w)
	for range 30 {
		r.step()
	}
	cs := r.liveOf("chat")
	if len(cs) != 2 || !distinct(nodesOf(cs)) {
		t.Fatalf("instances %+v", cs)
	}
	refs := r.refusals("chat")
	if len(refs) != 1 || !strings.Contains(refs[0].Reason, "gate") {
		t.Fatalf("refusals %+v, want one naming the gate", refs)
	}
	decisions := 0
	for _, e := range r.entries(KindDecision) {
		if strings.Contains(string(e.Payload), `"replica":2`) {
			decisions++
		}
	}
	if decisions != 1 {
		t.Errorf("the unplaceable replica was decided and chained %d times, want 1", decisions)
	}
	// A third node: placed after the backoff.
	h := r.cl.AddNode(t, 3, 8)
	r.targets = r.cl.targets(engine.TrustPaired)
	if err := r.c.SetTargets(r.targets); err != nil {
		t.Fatal(err)
	}
	for range 70 {
		r.step()
		if len(r.liveOf("chat")) == 3 {
			break
		}
	}
	cs = r.liveOf("chat")
	if len(cs) != 3 || !distinct(nodesOf(cs)) || !slices.Contains(nodesOf(cs), h.ID) {
		t.Fatalf("instances %+v", cs)
	}
}

func TestDeclaredScaleDown(t *testing.T) {
	r, _, w, _ := declaredChat(t, 3)
	if n := len(r.liveOf("chat")); n != 3 {
		t.Fatalf("%d instances", n)
	}
	var keep string
	for _, p := range r.declaredPlacements("chat") {
		if p.Replica == 0 {
			keep = p.DecisionID
		}
	}
	w.Replicas = 1
	r.declare(true, w)
	r.step()
	cs := r.liveOf("chat")
	ps := r.declaredPlacements("chat")
	if len(cs) != 1 || len(ps) != 1 || ps[0].DecisionID != keep {
		t.Fatalf("after scaling down: instances %+v, placements %+v", cs, ps)
	}
	if !chainHas(r.entries(KindLifecycle), "scaled down to 1 replicas") {
		t.Error("retirement not chained")
	}
}

// TestUndeclaredUnloaded: a declaration removed takes its instances down,
// also one whose node was dead then (when it returns); an operator's
// placement of the same package stays.
func TestUndeclaredUnloaded(t *testing.T) {
	r, hs, _, dir := declaredChat(t, 2)
	op := r.place(Order{PackageDir: dir, Start: true})
	if op.Placed == nil {
		t.Fatal("operator placement not placed")
	}
	// A node of chat's that the operator's instance is not on.
	dead := hostOf(hs, r.liveOf("chat")[0].node)
	if dead.ID == op.Placed.Node {
		dead = hostOf(hs, r.liveOf("chat")[1].node)
	}
	r.cl.Kill(dead)
	r.step()
	r.declare(true)
	calls := r.placeCalls()
	r.step()
	if cs := r.liveOf("chat"); len(cs) != 0 {
		t.Fatalf("undeclared instances still live: %+v", cs)
	}
	if ps := r.c.Placements(); len(ps) != 2 || (ps[0].DecisionID != op.DecisionID && ps[1].DecisionID != op.DecisionID) {
		t.Fatalf("placements %+v: want the operator's and the retiring one on the dead node", ps)
	}
	for range 10 {
		r.step()
	}
	if n := r.placeCalls(); n != calls {
		t.Errorf("%d place calls after the declaration went", n-calls)
	}
	r.cl.Revive(dead)
	r.step()
	if cs := r.instancesOf("chat"); len(cs) != 0 {
		t.Fatalf("returning node kept its undeclared copy: %+v", cs)
	}
	ps := r.c.Placements()
	if len(ps) != 1 || ps[0].DecisionID != op.DecisionID || ps[0].Life != LifePlaced {
		t.Fatalf("placements %+v, want the operator's alone", ps)
	}
	if n, _ := r.cl.Copies("echo"); n != 1 {
		t.Errorf("%d copies of echo, want the operator's", n)
	}
}

// TestDeclaredReplicaMovesOffDeadNode: a lost replica is rescheduled as
// that replica (not placed anew beside the reschedule), on a node without
// the other replica.
func TestDeclaredReplicaMovesOffDeadNode(t *testing.T) {
	r, hs, _, _ := declaredChat(t, 2)
	before := r.liveOf("chat")
	r.cl.Set(hostOf(hs, before[0].node), func(h *planetest.Host) { h.Down = true })
	for range 10 {
		r.step()
		if cs := r.liveOf("chat"); len(cs) > 2 {
			t.Fatalf("%d live instances", len(cs))
		}
	}
	cs := r.liveOf("chat")
	if len(cs) != 2 || !distinct(nodesOf(cs)) || slices.Contains(nodesOf(cs), before[0].node) {
		t.Fatalf("after the death: %+v", cs)
	}
	replicas := map[int]int{}
	for _, p := range r.declaredPlacements("chat") {
		if p.Life == LifePlaced {
			replicas[p.Replica]++
		}
	}
	if replicas[0] != 1 || replicas[1] != 1 {
		t.Errorf("placed replicas %v", replicas)
	}
	if len(r.entries(KindMigrate)) != 1 {
		t.Errorf("migrations %d", len(r.entries(KindMigrate)))
	}
}

// upgradeRig has replicas 2 of chat at 1.0.0 on three nodes.
// declaredChat is a rig of three nodes with echo 1.0.0 and chat declared
// with replicas, after one tick; it returns the workload as declared and
// the package's directory too.
func declaredChat(t *testing.T, replicas int) (*rig, []*planetest.Host, Workload, string) {
	t.Helper()
	r, hs := newRig(t, 8, 8, 8)
	dir := r.addVersion("echo", "1.0.0", 1, nil)
	w := chat
	w.Replicas = replicas
	r.declare(false, w)
	r.tick()
	return r, hs, w, dir
}

func upgradeRig(t *testing.T) (*rig, []*planetest.Host) {
	r, hs, _, _ := declaredChat(t, 2)
	if n := len(r.liveOf("chat")); n != 2 {
		t.Fatalf("%d instances", n)
	}
	return r, hs
}

// setState sets the state every host reports for instances of version.
func (r *rig) setState(version, state string) {
	r.cl.Mu.Lock()
	defer r.cl.Mu.Unlock()
	for _, h := range r.cl.Hosts {
		for iid, in := range h.Instances {
			if h.Meta[iid].Version == version {
				in.Lifecycle = state
				h.Instances[iid] = in
			}
		}
	}
}

func versionsOf(cs []copyOf) map[string]int {
	out := map[string]int{}
	for _, c := range cs {
		out[c.version]++
	}
	return out
}

// wantOldNew fails, saying what, unless chat's live copies are old at
// 1.0.0 and new at 1.1.0.
func (r *rig) wantOldNew(what string, old, new int) {
	r.t.Helper()
	if v := versionsOf(r.liveOf("chat")); v["1.0.0"] != old || v["1.1.0"] != new {
		r.t.Fatalf("%s: %v", what, v)
	}
}

func TestDeclaredUpgradeOneAtATimeNewHealthyFirst(t *testing.T) {
	r, hs := upgradeRig(t)
	for _, h := range hs {
		r.cl.Set(h, func(h *planetest.Host) { h.StartAs = ctl.StateUnhealthy })
	}
	r.addVersion("echo", "1.1.0", 1, nil)
	r.step()
	r.wantOldNew("after the first upgrade step", 2, 1)
	// The new instance is not healthy: the old one stays, and no second
	// upgrade starts.
	for range 5 {
		r.step()
		r.wantOldNew("while the new one is unhealthy", 2, 1)
	}
	// Healthy: the old one it replaces is unloaded in the tick that sees
	// it, and the next replica's upgrade starts (the same way).
	r.setState("1.1.0", ctl.StateRunning)
	r.step()
	r.wantOldNew("after the first new instance ran healthy", 1, 2)
	for range 3 {
		r.step()
		r.wantOldNew("while the second new one is unhealthy", 1, 2)
	}
	r.setState("1.1.0", ctl.StateRunning)
	for range 3 {
		r.step()
	}
	cs := r.liveOf("chat")
	if v := versionsOf(cs); v["1.1.0"] != 2 || len(cs) != 2 || !distinct(nodesOf(cs)) {
		t.Fatalf("upgraded: %+v", cs)
	}
	for _, p := range r.declaredPlacements("chat") {
		if p.Version != "1.1.0" || p.Supersedes != "" || p.Life != LifePlaced {
			t.Errorf("placement %+v", p)
		}
	}
	if !chainHas(r.entries(KindMigrate), `"reason":"upgrade"`) {
		t.Error("upgrade not chained")
	}
}

// TestDeclaredUpgradeFailedKeepsOld: a new version that fails on its node
// is taken down; the old one keeps running; the refusal is chained once
// and the upgrade retried with the backoff.
func TestDeclaredUpgradeFailedKeepsOld(t *testing.T) {
	r, hs := upgradeRig(t)
	for _, h := range hs {
		r.cl.Set(h, func(h *planetest.Host) { h.StartAs = ctl.StateFailed })
	}
	r.addVersion("echo", "1.1.0", 1, nil)
	for range 20 {
		r.step()
		if v := versionsOf(r.liveOf("chat")); v["1.0.0"] != 2 {
			t.Fatalf("old version went down: %v", v)
		}
	}
	refs := r.refusals("chat")
	if len(refs) != 1 || !strings.Contains(refs[0].Reason, "failed") {
		t.Fatalf("refusals %+v", refs)
	}
	tries := 0
	for _, e := range r.entries(KindDecision) {
		if strings.Contains(string(e.Payload), `"reason":"upgrade"`) {
			tries++
		}
	}
	if tries < 2 || tries > 4 {
		t.Errorf("%d upgrade attempts in 100 s, want a few (backoff)", tries)
	}
	for _, h := range hs {
		r.cl.Set(h, func(h *planetest.Host) { h.StartAs = "" })
	}
	for range 80 {
		r.step()
	}
	if v := versionsOf(r.liveOf("chat")); v["1.1.0"] != 2 || len(r.liveOf("chat")) != 2 {
		t.Fatalf("not upgraded once the new version runs: %v", v)
	}
}

// TestDeclaredVersionPinned: a pinned version is the only one placed; a
// newer one in the store is ignored, and instances of another version are
// replaced by the pinned one (a downgrade too).
func TestDeclaredVersionPinned(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	r.addVersion("echo", "1.0.0", 1, nil)
	r.addVersion("echo", "2.0.0", 1, nil)
	r.declare(false, chat)
	r.tick()
	if v := versionsOf(r.liveOf("chat")); v["2.0.0"] != 1 || len(v) != 1 {
		t.Fatalf("newest not placed: %v", v)
	}
	w := chat
	w.Version = "1.0.0"
	r.declare(true, w)
	for range 4 {
		r.step()
	}
	if v := versionsOf(r.liveOf("chat")); v["1.0.0"] != 1 || len(v) != 1 {
		t.Fatalf("pinned version not placed: %v", v)
	}
	r.addVersion("echo", "3.0.0", 1, nil)
	for range 4 {
		r.step()
	}
	if v := versionsOf(r.liveOf("chat")); v["1.0.0"] != 1 || len(v) != 1 {
		t.Fatalf("a pinned workload moved to a newer version: %v", v)
	}
}

// revoke makes the controller's verification refuse dir as revoked
// (package id).
func (r *rig) revoke(dir, id string) { r.revokeSubject(dir, pkg.SubjectPackage, id) }

// revokeSubject makes the controller's verification refuse dir for the
// revoked subject kind/value, as dispatch.VerifyPackage does.
func (r *rig) revokeSubject(dir, kind, value string) {
	r.cl.Mu.Lock()
	defer r.cl.Mu.Unlock()
	s := pkg.Subject{Kind: kind, Value: value, Reason: "compromised"}
	r.cl.Revoked[dir] = &pkg.VerifyError{Code: pkg.CodeRevoked, Detail: s.String() + " is revoked: compromised", Subject: &s}
}

// tearDown removes iid from h as a host's revocation sweep does.
func (r *rig) tearDown(h *planetest.Host, iid string) {
	r.cl.Set(h, func(h *planetest.Host) {
		delete(h.Instances, iid)
		h.Departed = append(h.Departed, ctl.Departed{InstanceID: iid, Reason: ctl.DepartedRevoked})
	})
}

func TestRevokedPackageRefusedNotRetriedEveryTick(t *testing.T) {
	hash := pkg.ManifestHash([]byte("echo 1.0.0"))
	signer := strings.Repeat("ab", 32)
	for _, sub := range []pkg.Subject{
		{Kind: pkg.SubjectPackage, Value: "echo"},
		{Kind: pkg.SubjectSigner, Value: signer},
		{Kind: pkg.SubjectArtifact, Value: hash},
	} {
		t.Run(sub.Kind, func(t *testing.T) { revokedRefused(t, sub) })
	}
}

func revokedRefused(t *testing.T, sub pkg.Subject) {
	r, _ := newRig(t, 8, 8)
	dir := r.addVersion("echo", "1.0.0", 1, nil)
	r.revokeSubject(dir, sub.Kind, sub.Value)
	r.declare(false, chat)
	for range 20 {
		r.step()
	}
	if n := r.placeCalls(); n != 0 {
		t.Fatalf("%d place calls for a revoked package", n)
	}
	refs := r.refusals("chat")
	if len(refs) != 1 || refs[0].Revoked == nil || refs[0].Revoked.Kind != sub.Kind || refs[0].Revoked.Value != sub.Value ||
		!strings.Contains(refs[0].Reason, "is revoked: compromised") {
		t.Fatalf("refusals %+v, want one naming the revoked subject", refs)
	}
	r.cl.Mu.Lock()
	verifies := r.cl.Verifies[dir]
	r.cl.Mu.Unlock()
	if verifies < 2 || verifies > 5 {
		t.Errorf("verified %d times in 20 ticks, want a few (the backoff)", verifies)
	}
	// The operator's place of it is refused and chained with the subject.
	if _, err := r.c.Place(context.Background(), Order{PackageDir: dir, Start: true}); !errors.Is(err, ErrNoPackage) {
		t.Fatalf("operator place of a revoked package: %v", err)
	}
	found := false
	for _, e := range r.entries(KindRefuse) {
		var rec refuseRecord
		_ = json.Unmarshal(e.Payload, &rec)
		found = found || (rec.Phase == "place" && rec.Revoked != nil && rec.Revoked.Value == sub.Value)
	}
	if !found {
		t.Error("operator's refused place not chained with the subject")
	}
	if n := r.placeCalls(); n != 0 {
		t.Fatalf("%d place calls", n)
	}
}

// TestRevokedInstanceForgottenNotRescheduled: an instance its host tore
// down for revocation is forgotten and never placed again, whether it was
// an operator's, a declared one, or on a node that was dead meanwhile.
func TestRevokedInstanceForgottenNotRescheduled(t *testing.T) {
	r, hs := newRig(t, 8, 8, 8)
	dir := r.addVersion("echo", "1.0.0", 1, nil)
	r.declare(false, chat)
	r.tick()
	op := r.place(Order{PackageDir: dir, Start: true})
	decl := r.liveOf("chat")[0]
	r.revoke(dir, "echo")
	r.tearDown(hostOf(hs, op.Placed.Node), op.Placed.InstanceID)
	r.tearDown(hostOf(hs, decl.node), decl.iid)
	calls := r.placeCalls()
	for range 20 {
		r.step()
	}
	if ps := r.c.Placements(); len(ps) != 0 {
		t.Fatalf("placements %+v", ps)
	}
	if n := r.placeCalls(); n != calls {
		t.Fatalf("%d place calls after the revocation", n-calls)
	}
	forgotten := 0
	for _, e := range r.entries(KindLifecycle) {
		if strings.Contains(string(e.Payload), "no longer on its node: revoked") {
			forgotten++
		}
	}
	if forgotten != 2 {
		t.Errorf("%d forgotten for revocation, want 2", forgotten)
	}
}

// TestRevokedLostInstanceNotRescheduled: a lost instance whose package was
// revoked meanwhile is not placed elsewhere; its copy is unloaded when
// its node returns.
func TestRevokedLostInstanceNotRescheduled(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	dir := r.addVersion("echo", "1.0.0", 1, nil)
	r.tick()
	rep := r.place(Order{PackageDir: dir, Start: true})
	h := hostOf(hs, rep.Placed.Node)
	r.cl.Kill(h)
	r.revoke(dir, "echo")
	calls := r.placeCalls()
	for range 12 {
		r.step()
	}
	if n := r.placeCalls(); n != calls {
		t.Fatalf("%d place calls for a revoked lost instance", n-calls)
	}
	ps := r.c.Placements()
	if len(ps) != 1 || ps[0].Life != LifeRetiring {
		t.Fatalf("placements %+v", ps)
	}
	r.cl.Revive(h)
	r.step()
	if ps := r.c.Placements(); len(ps) != 0 {
		t.Fatalf("placements %+v", ps)
	}
	r.wantCopies("echo", 0)
	if !chainHas(r.entries(KindLifecycle), `"revoked":{"kind":"package","value":"echo"`) {
		t.Error("retirement not chained with the revoked subject")
	}
}

// TestCoResidencyFromPlacedInstance: a placed instance's labels reach the
// engine, so a package excluding them is not placed beside it, even where
// the order prefers.
func TestCoResidencyFromPlacedInstance(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	hog := r.addVersion("hog", "1.0.0", 1, func(m *pkg.Manifest) { m.Labels = []string{"gpu-hog"} })
	quiet := r.addVersion("quiet", "1.0.0", 1, func(m *pkg.Manifest) { m.Excludes = []string{"gpu-hog"} })
	r.tick()
	if rep := r.place(Order{PackageDir: hog, Start: true, Pin: hs[0].ID}); rep.Placed == nil {
		t.Fatal("hog not placed")
	}
	rep := r.place(Order{PackageDir: quiet, Start: true, Prefer: []string{hs[0].ID}})
	if rep.Placed == nil || rep.Placed.Node != hs[1].ID {
		t.Fatalf("quiet placed %+v, want on %s", rep.Placed, hs[1].ID)
	}
	if !strings.Contains(rep.Explain(), "co_residency") {
		t.Errorf("explanation has no co-residency rejection:\n%s", rep.Explain())
	}
	// And the other way round: hog is not placed beside quiet.
	r.restart()
	rep = r.place(Order{PackageDir: hog, Name: "hog2", Start: true, Pin: hs[1].ID})
	if rep.Placed != nil {
		t.Fatalf("hog placed beside an instance that excludes it: %+v", rep.Placed)
	}
}

// TestStickyRescheduleStaysOnCurrentNode: a sticky package lost on a node
// that still answers (a reboot) is placed back there although another
// node scores better; a package that is not sticky moves.
func TestStickyRescheduleStaysOnCurrentNode(t *testing.T) {
	for _, sticky := range []bool{true, false} {
		t.Run(fmt.Sprint("sticky ", sticky), func(t *testing.T) {
			r, hs := newRig(t, 8, 8)
			r.cfg.Weights.Stickiness = 0 // only Sticky keeps a workload in place
			r.restart()
			x, y := hs[0], hs[1]
			// x has an accelerator the workload does not need: y scores
			// better (accel_fit).
			r.cl.Set(x, func(h *planetest.Host) { h.Facts.GPUs = sampleFacts().GPUs })
			dir := r.addVersion("cache", "1.0.0", 1, func(m *pkg.Manifest) { m.Sticky = sticky })
			r.cl.Kill(y)
			r.tick()
			rep := r.place(Order{PackageDir: dir, Start: true})
			if rep.Placed == nil || rep.Placed.Node != x.ID {
				t.Fatalf("placed %+v, want on %s", rep.Placed, x.ID)
			}
			r.cl.Revive(y)
			r.step()
			r.cl.Set(x, func(h *planetest.Host) { clear(h.Instances) }) // a reboot
			r.step()
			on := r.wantCopies("cache", 1)
			want := y.ID
			if sticky {
				want = x.ID
			}
			if on[0] != want {
				t.Fatalf("rescheduled on %s, want %s", on[0], want)
			}
			if sticky && !chainHas(r.entries(KindDecision), `"current_node":"`+x.ID+`"`) {
				t.Error("current node not chained with the decision")
			}
		})
	}
}

// TestDeclaredProgressSurvivesRestart: the backoff of an unplaceable
// declaration and an upgrade under way survive a restart.
func TestDeclaredProgressSurvivesRestart(t *testing.T) {
	t.Run("backoff", func(t *testing.T) {
		r, _ := newRig(t, 8)
		r.addVersion("echo", "1.0.0", 16, nil) // does not fit
		r.declare(false, chat)
		r.tick()
		r.restart()
		for range 20 {
			r.step()
			r.restart()
		}
		if refs := r.refusals("chat"); len(refs) != 1 {
			t.Fatalf("%d refusals across restarts, want 1", len(refs))
		}
		decisions := len(r.entries(KindDecision))
		if decisions != 1 {
			t.Errorf("%d decisions, want 1", decisions)
		}
		r.c.mu.Lock()
		st := *r.c.decls["chat"]
		r.c.mu.Unlock()
		if st.Attempts < 3 || st.NextAttempt.Before(r.clk.Now()) {
			t.Errorf("restored state %+v", st)
		}
	})
	t.Run("upgrade", func(t *testing.T) {
		r, hs := upgradeRig(t)
		for _, h := range hs {
			r.cl.Set(h, func(h *planetest.Host) { h.StartAs = ctl.StateUnhealthy })
		}
		r.addVersion("echo", "1.1.0", 1, nil)
		r.step()
		r.restart()
		r.step()
		r.wantOldNew("after the restart", 2, 1)
		for _, h := range hs {
			r.cl.Set(h, func(h *planetest.Host) { h.StartAs = "" })
		}
		r.setState("1.1.0", ctl.StateRunning)
		for range 4 {
			r.step()
			r.restart()
			if n := len(r.liveOf("chat")); n > 3 {
				t.Fatalf("%d instances", n)
			}
		}
		cs := r.liveOf("chat")
		if v := versionsOf(cs); v["1.1.0"] != 2 || len(cs) != 2 {
			t.Fatalf("upgraded: %+v", cs)
		}
	})
}

func TestOperatorStopIsNotRescheduled(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	r.tick()
	rep := r.place(echo)
	if _, err := r.c.Stop(context.Background(), "nope"); !errors.Is(err, ErrUnknownPlacement) {
		t.Fatalf("Stop of an unknown id: %v", err)
	}
	p, err := r.c.Stop(context.Background(), rep.Placed.InstanceID)
	if err != nil || !p.Stopped || p.HostState != ctl.StateStopped {
		t.Fatalf("Stop: %+v, %v", p, err)
	}
	if es := r.entries(KindInstance); len(es) != 1 || !strings.Contains(string(es[0].Payload), `"verb":"stop"`) {
		t.Fatalf("stop not chained: %d entries", len(es))
	}
	r.cl.Set(hostOf(hs, rep.Placed.Node), func(h *planetest.Host) { h.Down = true })
	for range 10 {
		r.step()
	}
	if n := r.liveCopies("echo"); n != 0 {
		t.Fatalf("a stopped instance was placed again: %d live copies", n)
	}
	if !chainHas(r.entries(KindAlert), "not running") {
		t.Error("no not-running alert")
	}
}

func TestOperatorUnloadForgets(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	r.tick()
	rep := r.place(echo)
	p, err := r.c.Unload(context.Background(), rep.DecisionID)
	if err != nil || p.DecisionID != rep.DecisionID {
		t.Fatalf("Unload: %+v, %v", p, err)
	}
	r.wantCopies("echo", 0)
	if ps := r.c.Placements(); len(ps) != 0 {
		t.Fatalf("placements %+v", ps)
	}
	calls := r.placeCalls()
	for range 10 {
		r.step()
	}
	if r.placeCalls() != calls {
		t.Error("an unloaded instance was placed again")
	}
	if !chainHas(r.entries(KindLifecycle), "unloaded by the operator") {
		t.Error("unload not chained")
	}
}

// TestTeardownOnDemotedNodeWaived: a node demoted below the kind's
// min_tier still has its instances stopped and unloaded; the waiver is
// chained.
func TestTeardownOnDemotedNodeWaived(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	r.tick()
	a := r.place(echo)
	o := echo
	o.Pin = hs[0].ID
	if a.Placed.Node == hs[0].ID {
		o.Pin = hs[1].ID
	}
	o.Name = "echo2"
	b := r.place(o)
	ts := r.cl.targets(engine.TrustDiscovered)
	if err := r.c.SetTargets(ts); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Stop(context.Background(), a.Placed.InstanceID); err != nil {
		t.Fatalf("Stop on a demoted node: %v", err)
	}
	if _, err := r.c.Unload(context.Background(), b.Placed.InstanceID); err != nil {
		t.Fatalf("Unload on a demoted node: %v", err)
	}
	var recs []instanceRecord
	for _, e := range r.entries(KindInstance) {
		var rec instanceRecord
		if err := json.Unmarshal(e.Payload, &rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if len(recs) != 2 || !recs[0].TierWaived || !recs[1].TierWaived || !strings.Contains(recs[0].Waiver, "below min_tier paired") {
		t.Fatalf("records %+v", recs)
	}
	if r.liveCopies("echo") != 1 {
		t.Fatalf("%d live copies (the stopped one stays listed)", r.liveCopies("echo"))
	}
}

// TestDeclaredAllowEmulated: a declared workload whose package has only
// an emulated variant is unplaceable while the declaration does not
// allow emulation (the engine's emulation_not_allowed, chained as the
// refusal); declared with allow_emulated, it is placed in the emulated
// tier, and its stored order keeps the opt-in (so a reschedule does too).
func TestDeclaredAllowEmulated(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	r.addVersion("echo", "1.0.0", 1, func(m *pkg.Manifest) {
		m.Variants = []pkg.Variant{{Name: "emu", Execution: grammar.ExecutionEmulated, Resources: pkg.Resources{MemBytes: 1 << 30}}}
	})
	r.declare(false, chat)
	r.tick()
	if cs := r.liveOf("chat"); len(cs) != 0 {
		t.Fatalf("placed without allow_emulated: %+v", cs)
	}
	refs := r.refusals("chat")
	if len(refs) != 1 || !strings.Contains(refs[0].Reason, string(engine.CodeEmulationNotAllowed)) {
		t.Fatalf("refusals %+v, want one naming emulation_not_allowed", refs)
	}

	w := chat
	w.AllowEmulated = true
	r.declare(true, w)
	for range 70 {
		r.step()
		if len(r.liveOf("chat")) == 1 {
			break
		}
	}
	if cs := r.liveOf("chat"); len(cs) != 1 {
		t.Fatalf("instances %+v, want one with allow_emulated", cs)
	}
	ps := r.declaredPlacements("chat")
	if len(ps) != 1 || ps[0].Order == nil || !ps[0].Order.AllowEmulated || ps[0].Variant != "emu" {
		t.Fatalf("placements %+v, want one of variant emu whose order allows emulation", ps)
	}
	rep, ok := r.c.Recent(ps[0].DecisionID)
	if !ok || rep.Decision.Chosen == nil || rep.Decision.Chosen.Tier != engine.TierEmulated || !rep.Decision.AllowEmulated {
		t.Fatalf("decision %s (found %v): %+v, want chosen in the emulated tier", ps[0].DecisionID, ok, rep.Decision)
	}
}
