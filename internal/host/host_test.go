package host

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/table"
)

func TestPlaceServeStopUnload(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	p := buildEcho(t, c.publisher)
	res, decision, err := c.place(t, p, true)
	if err != nil {
		t.Fatalf("place: %v", err)
	}
	wantID := ctl.InstanceID(p.m.ID, p.m.Version, "default", pkg.ManifestHash(p.manifest), ctl.InstanceConfig{}, c.hostNode.Ident.ID())
	if diff := cmp.Diff(ctl.PlaceResult{InstanceID: wantID, Runtime: "process", Variant: "default", Package: "echo-llm",
		Status: ctl.InstanceState{State: ctl.StateRunning}, Node: c.hostNode.Ident.ID()}, res); diff != "" {
		t.Errorf("place result (-want +got):\n%s", diff)
	}
	var target table.Target
	meshtest.WaitFor(t, "chat registered", func() bool {
		tg, ok := c.hostNode.Table.Resolve("chat")
		target = tg
		return ok && tg.Kind == table.TargetLocal
	})
	resp, err := http.Get(target.Base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !slices.Contains([]string{string(body)}, string(body)) || len(body) == 0 {
		t.Fatalf("/v1/models = %d %q", resp.StatusCode, body)
	}

	// A second place of the loaded id is refused.
	if _, _, err := c.place(t, p, true); refusalCode(err) != ctl.CodeRuntime {
		t.Errorf("second place: %v, want runtime refusal", err)
	}

	st := c.statusList(t, false)
	if len(st.InFlight) != 0 || len(st.Instances) != 1 || st.Instances[0].Lifecycle != ctl.StateRunning || st.Instances[0].DecisionID != decision {
		t.Errorf("status = %+v", st)
	}
	pid := c.instance(wantID).managed.PID()

	var stopped ctl.StopResult
	c.mustCall(t, ctl.MethodStop, ctl.InstanceParams{InstanceID: wantID, GraceMS: 1000}, newDecision(), &stopped)
	if stopped.Stopped != wantID {
		t.Errorf("stop result %+v", stopped)
	}
	if _, ok := c.hostNode.Table.Resolve("chat"); ok {
		t.Error("chat still resolves after stop")
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("process %d still exists after stop", pid)
	}
	if got := c.state(wantID); got != ctl.StateStopped {
		t.Errorf("state after stop = %q", got)
	}
	var logs ctl.LogsResult
	c.mustCall(t, ctl.MethodLogs, ctl.InstanceParams{InstanceID: wantID}, "", &logs)
	if logs.InstanceID != wantID || logs.ExitCode == nil {
		t.Errorf("logs = %+v", logs)
	}

	// start again, then unload from running.
	c.mustCall(t, ctl.MethodStart, ctl.InstanceParams{InstanceID: wantID}, newDecision(), nil)
	meshtest.WaitFor(t, "chat registered again", func() bool { _, ok := c.hostNode.Table.Resolve("chat"); return ok })
	var un ctl.UnloadResult
	c.mustCall(t, ctl.MethodUnload, ctl.InstanceParams{InstanceID: wantID}, newDecision(), &un)
	if _, ok := c.hostNode.Table.Resolve("chat"); ok {
		t.Error("chat still resolves after unload")
	}
	st = c.statusList(t, true)
	if diff := cmp.Diff(ctl.StatusList{InFlight: []string{}, Instances: []ctl.InstanceStatus{},
		Departed: []ctl.Departed{{InstanceID: wantID, Reason: ctl.DepartedUnloaded}}}, st); diff != "" {
		t.Errorf("status after unload (-want +got):\n%s", diff)
	}
	if _, err := c.call(t, ctl.MethodStart, ctl.InstanceParams{InstanceID: wantID}, newDecision()); refusalCode(err) != ctl.CodeUnknownInstance {
		t.Errorf("start after unload: %v", err)
	}

	// The same workload placed again gets the same id, fetched again (the
	// unload removed its package directory), and leaves the departed list.
	fetches := c.srv.fetches.Load()
	res2, _, err := c.place(t, p, false)
	if err != nil || res2.InstanceID != wantID || res2.Status.State != ctl.StateLoaded {
		t.Fatalf("place again: %+v %v", res2, err)
	}
	if c.srv.fetches.Load() == fetches {
		t.Error("a package was placed again without a fetch after its directory was removed")
	}
	if st := c.statusList(t, true); len(st.Departed) != 0 {
		t.Errorf("departed after a fresh placement: %+v", st.Departed)
	}
	for _, k := range []string{KindPlaceBegin, KindFetchDone, KindPlaceOK, KindStop, KindStart, KindUnload, KindPlaceRefused} {
		if len(c.audit.ofKind(k)) == 0 {
			t.Errorf("no %s chained", k)
		}
	}
	var desc ctl.DescribeResult
	c.mustCall(t, ctl.MethodDescribe, nil, "", &desc)
	if desc.ChainHead != "deadbeef" || len(desc.Facts) < 10 || len(desc.Advertisement) == 0 {
		t.Errorf("describe = %+v", desc)
	}
}

func TestPlaceRefusals(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	stranger := newKey(t)
	revokedKey := newKey(t)
	if err := c.h.ApplyConfig(Config{Enabled: true, Controllers: []ed25519.PublicKey{c.caller.Ident.PublicKey()},
		TrustAnchors: pkg.Anchors{pubOf(c.publisher), pubOf(revokedKey)}, DataDir: c.hostNode.Dir, HealthInterval: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.rev.Revoke(pkg.Subject{Kind: pkg.SubjectSigner, Value: hex.EncodeToString(pubOf(revokedKey))}); err != nil {
		t.Fatal(err)
	}
	unsigned := buildCrash(t, c.publisher)
	unsigned.sig = []byte(`{"signatures":[]}`)
	tests := []struct {
		name   string
		pkg    testPackage
		tamper bool
		want   ctl.Code
	}{
		{name: "tampered artifact", pkg: buildCrash(t, c.publisher), tamper: true, want: ctl.CodeVerify},
		{name: "unsigned", pkg: unsigned, want: ctl.CodeVerify},
		{name: "non-anchor signer", pkg: buildCrash(t, stranger), want: ctl.CodeVerify},
		{name: "revoked signer", pkg: buildCrash(t, revokedKey), want: ctl.CodeGovernance},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.srv.tamper.Store(tt.tamper)
			defer c.srv.tamper.Store(false)
			before := len(c.audit.ofKind(KindPlaceRefused))
			_, _, err := c.place(t, tt.pkg, false)
			if got := refusalCode(err); got != tt.want {
				t.Fatalf("place: %v, want %s", err, tt.want)
			}
			meshtest.WaitFor(t, "refusal chained", func() bool { return len(c.audit.ofKind(KindPlaceRefused)) == before+1 })
		})
	}
	if st := c.statusList(t, false); len(st.Instances) != 0 || len(st.InFlight) != 0 {
		t.Errorf("status after refusals: %+v", st)
	}
}

func TestRequestRefusals(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	other := newKey(t)
	otherClient, _ := ctl.NewClient(ctl.ClientConfig{Key: other})
	past := func() time.Time { return time.Now().Add(-10 * time.Minute) }
	expiredClient, _ := ctl.NewClient(ctl.ClientConfig{Key: c.caller.Ident.PrivateKey(), Now: past})
	fixed := make([]byte, 64)
	replayClient, _ := ctl.NewClient(ctl.ClientConfig{Key: c.caller.Ident.PrivateKey(), Rand: &repeatReader{b: fixed[:16]}})

	if _, err := c.callWith(t, replayClient, ctl.MethodStatus, nil, ""); err != nil {
		t.Fatalf("first status: %v", err)
	}
	if _, err := c.callWith(t, replayClient, ctl.MethodStatus, nil, ""); refusalCode(err) != ctl.CodeReplay {
		t.Errorf("replayed: %v", err)
	}
	if _, err := c.callWith(t, expiredClient, ctl.MethodStatus, nil, ""); refusalCode(err) != ctl.CodeExpired {
		t.Errorf("expired: %v", err)
	}
	if _, err := c.callWith(t, otherClient, ctl.MethodStatus, nil, ""); refusalCode(err) != ctl.CodePeerMismatch {
		t.Errorf("other key on the caller's link: %v", err)
	}
	// The caller stops being a controller: mutations and status are
	// unauthorized, describe still served to the admitted peer.
	if err := c.h.ApplyConfig(Config{Enabled: true, Controllers: []ed25519.PublicKey{pubOf(other)},
		TrustAnchors: pkg.Anchors{pubOf(c.publisher)}, DataDir: c.hostNode.Dir}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.call(t, ctl.MethodStop, ctl.InstanceParams{InstanceID: "x"}, newDecision()); refusalCode(err) != ctl.CodeUnauthorized {
		t.Errorf("non-controller stop: %v", err)
	}
	if _, err := c.call(t, ctl.MethodStatus, nil, ""); refusalCode(err) != ctl.CodeUnauthorized {
		t.Errorf("admitted peer status: %v", err)
	}
	if _, err := c.call(t, ctl.MethodDescribe, nil, ""); err != nil {
		t.Errorf("admitted peer describe: %v", err)
	}
	meshtest.WaitFor(t, "5 ctl refusals chained", func() bool { return len(c.audit.ofKind(KindCtlRefused)) == 5 })
}

// repeatReader returns the same bytes forever: every nonce is the same.
type repeatReader struct{ b []byte }

func (r *repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = r.b[i%len(r.b)]
	}
	return len(p), nil
}

func TestLostAnswerStaysVisible(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	p := buildCrash(t, c.publisher)
	hold, holding := make(chan struct{}), make(chan struct{})
	c.srv.mu.Lock()
	c.srv.hold, c.srv.holding = hold, holding
	c.srv.mu.Unlock()
	d := newDecision()
	c.srv.offer(d, p)
	ctx, cancel := context.WithCancel(context.Background())
	callDone := make(chan error, 1)
	go func() {
		_, err := c.client.Call(ctx, c.opener(), c.target(), ctl.MethodLoad, p.params(false), d)
		callDone <- err
	}()
	select {
	case <-holding:
	case <-time.After(waitTimeout):
		t.Fatal("fetch never reached the artifact server")
	}
	if st := c.statusList(t, false); !slices.Equal(st.InFlight, []string{d}) || len(st.Instances) != 0 {
		t.Errorf("status while fetching = %+v", st)
	}
	cancel() // the answer is lost
	if err := <-callDone; err == nil {
		t.Fatal("call succeeded after cancel")
	} else if ce, ok := err.(*ctl.CallError); !ok || ce.Class != ctl.ClassIndeterminate {
		t.Errorf("lost answer class: %v", err)
	}
	close(hold)
	var st ctl.StatusList
	meshtest.WaitFor(t, "instance listed", func() bool {
		st = c.statusList(t, false)
		return len(st.InFlight) == 0 && len(st.Instances) == 1
	})
	if st.Instances[0].DecisionID != d || st.Instances[0].Lifecycle != ctl.StateLoaded {
		t.Errorf("instance after the lost answer: %+v", st.Instances[0])
	}
}

func TestCrashingInstanceRestartsThenFails(t *testing.T) {
	policy := runner.RestartPolicy{Max: 2, Window: time.Minute, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	c := newCluster(t, clusterOpts{policy: policy})
	p := buildCrash(t, c.publisher)
	res, _, err := c.place(t, p, true)
	if err != nil {
		t.Fatalf("place: %v", err)
	}
	meshtest.WaitFor(t, "failed", func() bool { return c.state(res.InstanceID) == ctl.StateFailed })
	var st ctl.InstanceStatus
	c.mustCall(t, ctl.MethodStatus, ctl.InstanceParams{InstanceID: res.InstanceID}, "", &st)
	if st.Lifecycle != ctl.StateFailed || st.Restarts != 2 {
		t.Errorf("status = %+v, want failed with 2 restarts", st)
	}
	if got := len(c.audit.ofKind(KindRestart)); got != 2 {
		t.Errorf("restarts chained = %d, want 2", got)
	}
	if got := len(c.audit.ofKind(KindFailed)); got != 1 {
		t.Errorf("failures chained = %d, want 1", got)
	}
	var logs ctl.LogsResult
	c.mustCall(t, ctl.MethodLogs, ctl.InstanceParams{InstanceID: res.InstanceID}, "", &logs)
	if logs.Stderr != "crashing\n" {
		t.Errorf("stderr = %q", logs.Stderr)
	}
}

func TestFetchResumesAfterDrop(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	p := buildEcho(t, c.publisher)
	c.srv.dropOnce.Store(true)
	if _, _, err := c.place(t, p, false); err != nil {
		t.Fatalf("load: %v", err)
	}
	if c.srv.dropOnce.Load() {
		t.Fatal("the stream was never dropped")
	}
	done := c.audit.ofKind(KindFetchDone)
	if len(done) != 1 || done[0]["resumes"] != float64(1) {
		t.Errorf("fetch.done = %v, want one resume", done)
	}
}

func TestRevocationTearsDownRunningInstance(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	p := buildEcho(t, c.publisher)
	res, _, err := c.place(t, p, true)
	if err != nil {
		t.Fatalf("place: %v", err)
	}
	meshtest.WaitFor(t, "chat registered", func() bool { _, ok := c.hostNode.Table.Resolve("chat"); return ok })
	pid := c.instance(res.InstanceID).managed.PID()
	if _, err := c.rev.Revoke(pkg.Subject{Kind: pkg.SubjectSigner, Value: hex.EncodeToString(pubOf(c.publisher))}); err != nil {
		t.Fatal(err)
	}
	// The record follows the instance's removal from the list.
	meshtest.WaitFor(t, "teardown", func() bool {
		return c.instance(res.InstanceID) == nil && len(c.audit.ofKind(KindRevokedTeardown)) > 0
	})
	if _, ok := c.hostNode.Table.Resolve("chat"); ok {
		t.Error("chat resolves after the teardown")
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Error("process alive after the teardown")
	}
	recs := c.audit.ofKind(KindRevokedTeardown)
	if len(recs) != 1 || recs[0]["unloaded"] != true || recs[0]["instance_id"] != res.InstanceID {
		t.Errorf("teardown records = %v", recs)
	}
	// The package directory goes last, after the record.
	meshtest.WaitFor(t, "package directory removed", func() bool { return !exists(t, c.packageDir(p)) })
	st := c.statusList(t, true)
	if diff := cmp.Diff([]ctl.Departed{{InstanceID: res.InstanceID, Reason: ctl.DepartedRevoked}}, st.Departed); diff != "" {
		t.Errorf("departed (-want +got):\n%s", diff)
	}
	// And it cannot be placed again.
	if _, _, err := c.place(t, p, true); refusalCode(err) != ctl.CodeGovernance {
		t.Errorf("place of a revoked package: %v", err)
	}
}

// TestApplyConfigLabelsReachSignedFacts: a labels reload is in the next
// describe, in the signed facts (with a higher seq) and the advertisement;
// a config the host refuses (a tier label, another data dir) changes
// neither.
func TestApplyConfigLabelsReachSignedFacts(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	describe := func() (facts.Facts, uint64, table.Advertisement) {
		t.Helper()
		desc, f, meta := c.describeFacts(t)
		var ad table.Advertisement
		if err := json.Unmarshal(desc.Advertisement, &ad); err != nil {
			t.Fatal(err)
		}
		return f, meta.Seq, ad
	}
	_, seq1, _ := describe()
	cfg := Config{Enabled: true, Controllers: []ed25519.PublicKey{c.caller.Ident.PublicKey()},
		TrustAnchors: pkg.Anchors{pubOf(c.publisher)}, DataDir: c.hostNode.Dir,
		HealthInterval: 50 * time.Millisecond, Labels: map[string]string{"rack": "b"}}
	if err := c.h.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	f, seq2, ad := describe()
	if diff := cmp.Diff(map[string]string{"rack": "b"}, f.Labels); diff != "" {
		t.Errorf("signed facts labels (-want +got):\n%s", diff)
	}
	if seq2 <= seq1 {
		t.Errorf("facts seq %d after the reload, want more than %d", seq2, seq1)
	}
	if ad.Metadata["label.rack"] != "b" {
		t.Errorf("advertisement metadata = %v, want label.rack b", ad.Metadata)
	}

	bad := cfg
	bad.Labels = map[string]string{"tier": "pinned"}
	if err := c.h.ApplyConfig(bad); err == nil {
		t.Error("ApplyConfig accepted a tier label")
	}
	moved := cfg
	moved.DataDir = t.TempDir()
	moved.Labels = map[string]string{"rack": "c"}
	if _, err := c.h.Prepare(moved); err == nil {
		t.Error("Prepare accepted a new data dir")
	}
	// Prepared, never committed: nothing may change.
	if _, err := c.h.Prepare(Config{DataDir: c.hostNode.Dir, Labels: map[string]string{"rack": "d"}}); err != nil {
		t.Fatal(err)
	}
	if f, _, ad := describe(); f.Labels["rack"] != "b" || ad.Metadata["label.rack"] != "b" || !c.h.Status().Enabled {
		t.Errorf("after refused and uncommitted configs: facts labels %v, advertisement %v, enabled %v; want rack b, enabled",
			f.Labels, ad.Metadata, c.h.Status().Enabled)
	}
}

// TestApplyConfigClassReachesSignedFacts: a node.class reload is in the
// next describe's signed facts as node.class.<class>; a class the host
// refuses (not one capability word) changes nothing, and an empty class
// removes the record.
func TestApplyConfigClassReachesSignedFacts(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	classes := func() []string {
		t.Helper()
		_, f, _ := c.describeFacts(t)
		var out []string
		for _, r := range f.Capabilities {
			if grammar.CapabilityFamily(r.ID) == "node" {
				out = append(out, r.ID+" "+r.Provenance)
			}
		}
		return out
	}
	if got := classes(); len(got) != 0 {
		t.Fatalf("class records before any class: %v", got)
	}
	cfg := Config{Enabled: true, Controllers: []ed25519.PublicKey{c.caller.Ident.PublicKey()},
		TrustAnchors: pkg.Anchors{pubOf(c.publisher)}, DataDir: c.hostNode.Dir,
		HealthInterval: 50 * time.Millisecond, Class: "dev-mac"}
	if err := c.h.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if got := classes(); len(got) != 1 || got[0] != "node.class.dev-mac claimed" {
		t.Fatalf("class records after the reload: %v, want node.class.dev-mac claimed", got)
	}
	bad := cfg
	bad.Class = "dev.mac"
	if err := c.h.ApplyConfig(bad); err == nil {
		t.Error("ApplyConfig accepted a dotted class")
	}
	if got := classes(); len(got) != 1 || got[0] != "node.class.dev-mac claimed" {
		t.Errorf("class records after a refused config: %v", got)
	}
	cfg.Class = ""
	if err := c.h.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if got := classes(); len(got) != 0 {
		t.Errorf("class records after the class was removed: %v", got)
	}
}

// describeFacts describes the host as its controller and returns the
// answer with its signed facts, verified against the host's key.
func (c *cluster) describeFacts(t *testing.T) (ctl.DescribeResult, facts.Facts, facts.Meta) {
	t.Helper()
	var desc ctl.DescribeResult
	c.mustCall(t, ctl.MethodDescribe, nil, "", &desc)
	var signed facts.Signed
	if err := json.Unmarshal(desc.Facts, &signed); err != nil {
		t.Fatal(err)
	}
	f, meta, err := facts.Verify(signed, c.hostNode.Ident.PublicKey(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return desc, f, meta
}
