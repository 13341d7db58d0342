package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/operator"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/plane"
)

// placeJSON places through name's operator socket (ctl --json place) and
// decodes the controller's result, whatever the exit status.
func (mn *mnode) placeJSON(args ...string) (operator.PlaceResult, int, string) {
	t := mn.m.t
	t.Helper()
	out, errOut, rc := runCtl(t, append([]string{"--socket", mn.socket(), "--json", "place"}, args...)...)
	var res operator.PlaceResult
	if out != "" {
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("place %v: %v\n%s\n%s", args, err, out, errOut)
		}
	}
	return res, rc, errOut
}

// ctlOK runs ctl VERB ARGS on name's socket and fails unless it exits 0.
func (mn *mnode) ctlOK(args ...string) string {
	t := mn.m.t
	t.Helper()
	out, errOut, rc := runCtl(t, append([]string{"--socket", mn.socket()}, args...)...)
	if rc != 0 {
		t.Fatalf("ctl %v = %d\n%s\n%s", args, rc, out, errOut)
	}
	return out
}

// TestMeshtest_9_2_PlaceFetchStatusStopLogsUnload: A's controller places
// the echo-llm package on B, its only target, over the mesh. B fetches
// the payload from A before loading it (host.place.begin, then
// host.fetch.done with the package's bytes, then host.place.ok, all with
// the decision id); the instance runs; status, stop, logs (the model
// server's output), and unload work through A; placements are empty
// after the unload. A chains the decision (plane.decision, with the
// placement's node) and plane.placed with the same decision id.
func TestMeshtest_9_2_PlaceFetchStatusStopLogsUnload(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshEchoPackage(t)
	m := newMesh(t, "a", "b")
	b := m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor)))
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	idB := m.id("b")
	a.waitAlive(idB)

	res, rc, errOut := a.placeJSON(pkgDir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idB {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	dec := res.DecisionID

	// B fetched the payload from A before it loaded it.
	var order []string
	for _, e := range b.entries() {
		if e.Payload["decision_id"] == dec && strings.HasPrefix(e.Kind, "host.") {
			order = append(order, e.Kind)
		}
	}
	if strings.Join(order, " ") != "host.place.begin host.fetch.done host.start.begin host.start host.place.ok" &&
		strings.Join(order, " ") != "host.place.begin host.fetch.done host.place.ok" {
		t.Fatalf("B's chain for decision %s: %v", dec, order)
	}
	fetched := b.find("host.fetch.done", map[string]any{"decision_id": dec})
	if len(fetched) != 1 || fetched[0].Payload["cached"] == true {
		t.Fatalf("B's fetch: %+v", fetched)
	}
	// The payload (the echo-llm binary, megabytes) crossed the mesh.
	if n, _ := fetched[0].Payload["bytes"].(float64); n < 300<<10 {
		t.Fatalf("fetched %v bytes, want the whole binary", fetched[0].Payload["bytes"])
	}

	// A chained the decision (its entry hash is the decision id) and the
	// placement under that id.
	if e, ok := a.decision(dec); !ok || e.Payload["chosen"] != idB || e.Payload["dry_run"] != false {
		t.Fatalf("A's decision %s: %+v (found %v)", dec, e, ok)
	}
	if got := a.find(plane.KindPlaced, map[string]any{"decision_id": dec, "node": idB, "instance_id": res.InstanceID}); len(got) != 1 {
		t.Fatalf("A's placed records: %+v", a.find(plane.KindPlaced, nil))
	}
	if got := b.find("host.place.ok", map[string]any{"decision_id": dec, "instance_id": res.InstanceID}); len(got) != 1 {
		t.Fatalf("B's place.ok records: %+v", b.find("host.place.ok", nil))
	}

	// Status running, then stop, logs, unload through A.
	inst := res.InstanceID
	var st ctl.InstanceStatus
	ctlJSON(t, a.socket(), &st, "status", "b", inst)
	if st.InstanceID != inst || st.Status.State != ctl.StateRunning {
		t.Fatalf("status = %+v", st)
	}
	a.ctlOK("stop", "b", inst)
	var logs ctl.LogsResult
	ctlJSON(t, a.socket(), &logs, "logs", "b", inst)
	if logs.InstanceID != inst || !strings.Contains(logs.Stdout+logs.Stderr, "serving echo-1") {
		t.Fatalf("logs of %s: %+v", inst, logs)
	}
	a.ctlOK("unload", "b", inst)
	var ps []operator.PlacementDoc
	ctlJSON(t, a.socket(), &ps, "placements")
	if len(ps) != 0 {
		t.Fatalf("placements after unload: %+v", ps)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// signedRequest is a request from name's key to node id, signed on the
// cluster's clock, and its wire bytes.
func (mn *mnode) signedRequest(to string, method ctl.Method, decisionID string, body any) (ctl.Request, []byte) {
	t := mn.m.t
	t.Helper()
	nonce, err := ctl.NewNonce(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw := json.RawMessage("null")
	if body != nil {
		if raw, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	now := mn.m.clock.Now()
	req := ctl.Request{
		Version: ctl.Version, Method: method, Requester: mn.n.id.ID(), Target: to, Nonce: nonce,
		IssuedAtMS: now.UnixMilli(), ExpiresAtMS: now.Add(time.Minute).UnixMilli(), DecisionID: decisionID, Body: raw,
	}
	wire, err := ctl.SignRequest(mn.n.id.PrivateKey(), req)
	if err != nil {
		t.Fatal(err)
	}
	return req, wire
}

// send sends wire bytes of req over the mesh (a ctl stream to node to)
// and returns the verified answer.
func (mn *mnode) send(to string, toKey string, req ctl.Request, wire []byte) ctl.Response {
	t := mn.m.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := mn.n.mesh.OpenStream(ctx, to, mesh.KindCtl)
	if err != nil {
		t.Fatalf("open a ctl stream to %s: %v", to, err)
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(waitTimeout))
	if err := ctl.WriteMessage(s, wire); err != nil {
		t.Fatal(err)
	}
	resp, err := ctl.ReadMessage(s, ctl.MaxResponseBytes)
	if err != nil {
		t.Fatalf("read the answer of %s: %v", to, err)
	}
	pub, err := identity.ParsePublicKeyHex(toKey)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := ctl.VerifyResponse(resp, req, pub)
	if err != nil {
		t.Fatalf("answer of %s: %v", to, err)
	}
	return r
}

// refusedWith fails unless r is a refusal with code.
func refusedWith(t *testing.T, what string, r ctl.Response, code ctl.Code) {
	t.Helper()
	if r.Outcome != ctl.OutcomeRefused || r.Refusal == nil || r.Refusal.Code != code {
		t.Fatalf("%s: %+v (refusal %+v), want refused %s", what, r, r.Refusal, code)
	}
}

// TestMeshtest_9_2_NativeTierOverEmulated: the reference's ARM board
// over the dev Mac maps to nodeld's tiers native over emulated. B runs
// this machine's architecture; C reports another (its facts probe), so
// only the package's emulated variant fits it. With emulation allowed
// and C preferred, B still wins (strict tier order over affinity) with
// its native route, and C is eligible in the emulated tier; the
// explanation shows the tier order and a line per node. Without
// emulation, C is not eligible. Emulation is allowed the operator's way:
// ctl place --allow-emulated.
func TestMeshtest_9_2_NativeTierOverEmulated(t *testing.T) {
	t.Parallel()
	variants := `{"name": "native", "requires": {"os": ["linux"], "arch": ["` + runtime.GOARCH + `"], "runtimes": ["process"]}, "resources": {"mem_bytes": 67108864}},
	{"name": "emulated", "execution": "emulated", "requires": {"os": ["linux"], "runtimes": ["process"]}, "resources": {"mem_bytes": 67108864}}`
	dir, anchor := meshPackage(t, "tiers", echoManifest("tiers", "start.sh", variants), map[string]string{"start.sh": lightScript(t, "")})
	m := newMesh(t, "a", "b", "c")
	m.node("c").probe = &fakeProbe{arch: "riscv64"}
	m, a, b, c := threeNodesOn(t, m, anchor, "", nil)
	idB, idC := m.id("b"), m.id("c")

	// Without emulation C has no route.
	res, rc, _ := a.placeJSON("--dry-run", "--prefer", "c", dir)
	if rc != 0 || res.Node != idB {
		t.Fatalf("dry run = %d %+v", rc, res)
	}
	if !strings.Contains(res.Explain, idC) || !strings.Contains(res.Explain, "emulation_not_allowed") {
		t.Fatalf("dry run explain does not say why C is out:\n%s", res.Explain)
	}

	// ctl place --allow-emulated: C is eligible, in the emulated tier.
	res, rc, errOut := a.placeJSON("--allow-emulated", "--prefer", "c", dir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idB || res.Variant != "native" {
		t.Fatalf("place --allow-emulated = %d %+v\n%s", rc, res, errOut)
	}
	ex := res.Explain
	if !strings.Contains(ex, "allow_emulated: true") ||
		!strings.Contains(ex, "tier order (strict): native > emulated > dev_fallback") ||
		!strings.Contains(ex, "decision: PLACED on "+idB+" via native (tier native,") ||
		!strings.Contains(ex, idC+" eligible via emulated (tier emulated)") {
		t.Fatalf("explain does not rank C eligible in the emulated tier below B:\n%s", ex)
	}
	if e, ok := a.decision(res.DecisionID); !ok || e.Payload["chosen"] != idB {
		t.Fatalf("A's decision %s: %+v (found %v), want B chosen", res.DecisionID, e, ok)
	}
	if n, nc := len(b.instances()), len(c.instances()); n != 1 || nc != 0 {
		t.Fatalf("instances: B %d, C %d", n, nc)
	}
}

// TestMeshtest_9_2_AdmissionRefusalFallsThrough: A's controller holds
// B's facts with plenty of free memory; by the time A places, B has
// almost none (its probe, re-run once the fake clock passes the probe
// age). The engine still ranks B first, B's host refuses at admission,
// and C, next, places it. Chained on A (plane.dispatch refused
// admission) and on B (host.place.refused, admission).
func TestMeshtest_9_2_AdmissionRefusalFallsThrough(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b", "c")
	probe := &fakeProbe{}
	probe.memFree.Store(32 << 30)
	m.node("b").probe = probe
	m, a, b, c := threeNodesOn(t, m, anchor, "", nil)
	idB, idC := m.id("b"), m.id("c")

	probe.memFree.Store(1 << 20)
	m.clock.Advance(facts.DefaultMaxProbeAge + time.Second)
	res, rc, errOut := a.placeJSON("--prefer", "b", pkgDir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idC || len(res.Attempts) != 2 {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	if at := res.Attempts[0]; at.Node != idB || at.Outcome != "refused" || at.Code != string(ctl.CodeAdmission) {
		t.Fatalf("attempt on B: %+v", at)
	}
	if got := a.find(plane.KindDispatch, map[string]any{"decision_id": res.DecisionID, "node": idB, "outcome": "refused", "code": ctl.CodeAdmission}); len(got) != 1 {
		t.Fatalf("A's dispatch records: %+v", a.find(plane.KindDispatch, nil))
	}
	if got := b.find("host.place.refused", map[string]any{"decision_id": res.DecisionID, "code": ctl.CodeAdmission}); len(got) != 1 {
		t.Fatalf("B's refusals: %+v", b.find("host.place.refused", nil))
	}
	if n, nc := len(b.instances()), len(c.instances()); n != 0 || nc != 1 {
		t.Fatalf("instances: B %d, C %d", n, nc)
	}
}

// TestMeshtest_9_2_SignedCallsRefused: signed calls over the real mesh
// that B refuses, each chained by B's host (host.ctl.refused): an unknown
// method (unknown_method); the same signed request twice (the second is
// a replay); mutations without a decision id or with one that is no
// hash (invalid_request); a call beyond describe from an admitted peer
// that is no controller (unauthorized). In nodeld every admitted peer
// may describe (facts are signed for anyone), so the reference's
// "non-listed controller cannot describe" is: a node B does not admit
// cannot reach it at all (its handshake is refused and chained).
func TestMeshtest_9_2_SignedCallsRefused(t *testing.T) {
	t.Parallel()
	_, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b", "c", "d")
	keyA := m.node("a").key
	b := m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}, {name: "c", tier: "paired"}}, meshHost(keyA, anchor)))
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	c := m.start("c", m.config("c", []peer{{name: "b", tier: "paired"}}, ""))
	d := m.start("d", m.config("d", []peer{{name: "b", tier: "paired"}}, ""))
	idB := m.id("b")
	a.waitAlive(idB)

	req, wire := a.signedRequest(idB, "workload.frobnicate", "", nil)
	refusedWith(t, "workload.frobnicate", a.send(idB, b.key, req, wire), ctl.CodeUnknownMethod)
	waitFor(t, "B to chain the unknown method", func() bool {
		return len(b.find("host.ctl.refused", map[string]any{"code": ctl.CodeUnknownMethod})) == 1
	})

	req, wire = a.signedRequest(idB, ctl.MethodDescribe, "", nil)
	if r := a.send(idB, b.key, req, wire); r.Outcome != ctl.OutcomeOK {
		t.Fatalf("first describe: %+v", r)
	}
	refusedWith(t, "the same describe again", a.send(idB, b.key, req, wire), ctl.CodeReplay)
	waitFor(t, "B to chain the replay", func() bool {
		return len(b.find("host.ctl.refused", map[string]any{"code": ctl.CodeReplay, "peer": a.n.id.ID()})) == 1
	})

	for _, dec := range []string{"", "not-a-hash", strings.Repeat("A", 64)} {
		req, wire = a.signedRequest(idB, ctl.MethodStop, dec, ctl.InstanceParams{InstanceID: "echo-llm-00000000-" + idB})
		refusedWith(t, "stop with decision id "+dec, a.send(idB, b.key, req, wire), ctl.CodeInvalidRequest)
	}
	waitFor(t, "B to chain the invalid requests", func() bool {
		return len(b.find("host.ctl.refused", map[string]any{"code": ctl.CodeInvalidRequest, "method": ctl.MethodStop})) == 3
	})

	// C is admitted but no controller: describe yes, status no.
	waitFor(t, "C's link to B", func() bool { _, ok := c.n.mesh.Peer(idB); return ok })
	req, wire = c.signedRequest(idB, ctl.MethodDescribe, "", nil)
	if r := c.send(idB, b.key, req, wire); r.Outcome != ctl.OutcomeOK {
		t.Fatalf("describe from C: %+v", r)
	}
	req, wire = c.signedRequest(idB, ctl.MethodStatus, "", ctl.InstanceParams{})
	refusedWith(t, "status from C", c.send(idB, b.key, req, wire), ctl.CodeUnauthorized)
	waitFor(t, "B to chain C's unauthorized call", func() bool {
		return len(b.find("host.ctl.refused", map[string]any{"code": ctl.CodeUnauthorized, "peer": m.id("c"), "method": ctl.MethodStatus})) == 1
	})

	// D is not admitted by B: no link, its handshake refused and chained.
	waitFor(t, "B to refuse D's handshake", func() bool {
		return len(b.find(mesh.KindPeerRefused, map[string]any{"key": d.key, "reason": mesh.RefusalNotAdmitted})) > 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := d.n.dispatch.Call(ctx, idB, ctl.MethodDescribe, nil); err == nil {
		t.Fatal("D described B")
	}
}

// TestMeshtest_9_2_NothingFits: the package needs an architecture no
// target has: the decision is unplaceable, nothing is dispatched, the
// explanation says UNPLACEABLE and that the arch is not advertised, and
// the decision is chained all the same.
func TestMeshtest_9_2_NothingFits(t *testing.T) {
	t.Parallel()
	variant := `{"name": "default", "requires": {"os": ["linux"], "arch": ["riscv64"], "runtimes": ["process"]}, "resources": {"mem_bytes": 67108864}}`
	dir, anchor := meshPackage(t, "exotic", echoManifest("exotic", "start.sh", variant), map[string]string{"start.sh": lightScript(t, "")})
	m := newMesh(t, "a", "b")
	b := m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor)))
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	a.waitAlive(m.id("b"))
	res, rc, _ := a.placeJSON(dir)
	if rc != 1 || res.Outcome != operator.CodeUnplaceable || len(res.Attempts) != 0 {
		t.Fatalf("place = %d %+v", rc, res)
	}
	if !strings.Contains(res.Explain, "UNPLACEABLE") || !strings.Contains(res.Explain, "cpu.arch.riscv64`: not advertised") {
		t.Fatalf("explain:\n%s", res.Explain)
	}
	if e, ok := a.decision(res.DecisionID); !ok || e.Payload["chosen"] != nil {
		t.Fatalf("A's decision %s: %+v (found %v), want chained with no node chosen", res.DecisionID, e, ok)
	}
	if got := b.find("host.place.begin", nil); len(got) != 0 {
		t.Fatalf("B was asked to place: %+v", got)
	}
}

// TestMeshtest_9_2_RuntimeMissingNotOffered: the reference's node without
// a container adapter maps to a node without the runtime a variant
// needs (ollama here; nodeld has no container runtime). The only target
// lacks it: ineligible, the runtime not advertised, nothing dispatched.
func TestMeshtest_9_2_RuntimeMissingNotOffered(t *testing.T) {
	t.Parallel()
	variant := `{"name": "ollama", "requires": {"os": ["linux"], "runtimes": ["ollama"]}, "resources": {"mem_bytes": 67108864}}`
	dir, anchor := meshPackage(t, "needs-ollama", echoManifest("needs-ollama", "start.sh", variant), map[string]string{"start.sh": lightScript(t, "")})
	m := newMesh(t, "a", "b")
	m.node("b").probe = &fakeProbe{noRuntimes: true}
	b := m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor)))
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	a.waitAlive(m.id("b"))
	res, rc, _ := a.placeJSON(dir)
	if rc != 1 || res.Outcome != operator.CodeUnplaceable || len(res.Attempts) != 0 {
		t.Fatalf("place = %d %+v", rc, res)
	}
	if !strings.Contains(res.Explain, "runtime.ollama`: not advertised") {
		t.Fatalf("explain:\n%s", res.Explain)
	}
	if got := b.find("host.place.begin", nil); len(got) != 0 {
		t.Fatalf("B was asked to place: %+v", got)
	}
}

// TestMeshtest_9_2_ReplacedNodeSuspect: B is replaced at its address by a
// node with another key while A runs. A's next ticks get no verified
// describe: B is suspect (not dead before dead_after), and the new key is
// not learned.
func TestMeshtest_9_2_ReplacedNodeSuspect(t *testing.T) {
	t.Parallel()
	_, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b")
	cfgB := m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor))
	b := m.start("b", cfgB)
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	oldID := m.id("b")
	a.waitAlive(oldID)
	b.kill()
	if err := os.RemoveAll(b.dataDir); err != nil {
		t.Fatal(err)
	}
	b.key = makeKey(t, b.dataDir)
	b.run()
	waitFor(t, "A to refuse the new key at B's address", func() bool {
		a.tick()
		return len(a.find(mesh.KindPeerRefused, map[string]any{"key": b.key})) > 0
	})
	a.tick()
	v, ok := a.view(oldID)
	if !ok || v.Liveness != engine.Suspect {
		t.Fatalf("B: %+v (known %v), want suspect", v, ok)
	}
	if _, ok := a.view(m.id("b")); ok {
		t.Fatal("the new key became a target")
	}
}

// TestMeshtest_9_2_DevMacIsDevFallback: the reference's dev Mac is a
// node whose config says node.class: dev-mac, so its signed facts claim
// node.class.dev-mac, the engine's dev class. B and C run the same
// machine; C is the dev Mac. Preferred, C still ranks below B: it is
// listed in the dev_fallback tier and B, native, is chosen. Once B has
// no memory left (its facts, described again), C is the only fit and
// is chosen, in the dev_fallback tier.
func TestMeshtest_9_2_DevMacIsDevFallback(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshLightPackage(t)
	m := newMesh(t, "a", "b", "c")
	probe := &fakeProbe{}
	probe.memFree.Store(32 << 30)
	m.node("b").probe = probe
	m.node("c").class = "dev-mac"
	m, a, b, c := threeNodesOn(t, m, anchor, "", nil)
	idB, idC := m.id("b"), m.id("c")

	res, rc, errOut := a.placeJSON("--prefer", "c", pkgDir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idB || len(res.Attempts) != 1 {
		t.Fatalf("place = %d %+v\n%s", rc, res, errOut)
	}
	if !strings.Contains(res.Explain, "decision: PLACED on "+idB+" via default (tier native,") ||
		!strings.Contains(res.Explain, idC+" eligible via default (tier dev_fallback)") {
		t.Fatalf("explain does not rank C in dev_fallback below B:\n%s", res.Explain)
	}
	if n, nc := len(b.instances()), len(c.instances()); n != 1 || nc != 0 {
		t.Fatalf("instances: B %d, C %d", n, nc)
	}
	// ctl nodes shows the class C's facts claim, and none for B.
	var nodes []operator.NodeDoc
	if err := json.Unmarshal([]byte(a.ctlOK("--json", "nodes")), &nodes); err != nil {
		t.Fatal(err)
	}
	classes := map[string]string{}
	for _, n := range nodes {
		classes[n.ID] = n.Class
	}
	if classes[idC] != "dev-mac" || classes[idB] != "" {
		t.Fatalf("ctl nodes classes %v, want C dev-mac and B none", classes)
	}
	if out := a.ctlOK("nodes"); !strings.Contains(out, "CLASS") || !strings.Contains(out, "dev-mac") {
		t.Fatalf("ctl nodes does not show C's class:\n%s", out)
	}

	// B's memory is gone; A describes it again and C is the only fit.
	probe.memFree.Store(1 << 20)
	m.clock.Advance(facts.DefaultMaxProbeAge + time.Second)
	a.waitAlive(idB, idC)
	res, rc, errOut = a.placeJSON(pkgDir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idC || len(res.Attempts) != 1 {
		t.Fatalf("second place = %d %+v\n%s", rc, res, errOut)
	}
	if !strings.Contains(res.Explain, "decision: PLACED on "+idC+" via default (tier dev_fallback,") ||
		!strings.Contains(res.Explain, "memory: variant default: system pool") {
		t.Fatalf("explain of the second place:\n%s", res.Explain)
	}
	if e, ok := a.decision(res.DecisionID); !ok || e.Payload["chosen"] == nil {
		t.Fatalf("A's decision %s: %+v (found %v)", res.DecisionID, e, ok)
	}
	if n, nc := len(b.instances()), len(c.instances()); n != 1 || nc != 1 {
		t.Fatalf("instances after the second place: B %d, C %d", n, nc)
	}
}

// TestMeshtest_9_2_EmulatedOnlyNeedsTheFlag: B reports another
// architecture, so only the package's emulated variant fits it. Without
// --allow-emulated the place is unplaceable (exit 1, nothing sent to B),
// B rejected with the engine's emulation_not_allowed; the decision is
// chained all the same. With ctl place --allow-emulated it is placed on
// B, variant emulated, in the emulated tier.
func TestMeshtest_9_2_EmulatedOnlyNeedsTheFlag(t *testing.T) {
	t.Parallel()
	variants := `{"name": "native", "requires": {"os": ["linux"], "arch": ["` + runtime.GOARCH + `"], "runtimes": ["process"]}, "resources": {"mem_bytes": 67108864}},
	{"name": "emulated", "execution": "emulated", "requires": {"os": ["linux"], "runtimes": ["process"]}, "resources": {"mem_bytes": 67108864}}`
	dir, anchor := meshPackage(t, "tiers", echoManifest("tiers", "start.sh", variants), map[string]string{"start.sh": lightScript(t, "")})
	m := newMesh(t, "a", "b")
	m.node("b").probe = &fakeProbe{arch: "riscv64"}
	b := m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, meshHost(m.node("a").key, anchor)))
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	idB := m.id("b")
	a.waitAlive(idB)

	res, rc, errOut := a.placeJSON(dir)
	if rc != 1 || res.Outcome != operator.CodeUnplaceable || len(res.Attempts) != 0 {
		t.Fatalf("place without the flag = %d %+v\n%s", rc, res, errOut)
	}
	if !strings.Contains(res.Explain, "allow_emulated: false") || !strings.Contains(res.Explain, "UNPLACEABLE") ||
		!strings.Contains(res.Explain, string(engine.CodeEmulationNotAllowed)) {
		t.Fatalf("explain does not say emulation is not allowed:\n%s", res.Explain)
	}
	if _, ok := a.decision(res.DecisionID); !ok {
		t.Fatalf("the unplaceable decision %s is not chained", res.DecisionID)
	}
	if got := b.find("host.place.begin", nil); len(got) != 0 {
		t.Fatalf("B was asked to place: %+v", got)
	}

	res, rc, errOut = a.placeJSON("--allow-emulated", dir)
	if rc != 0 || res.Outcome != "placed" || res.Node != idB || res.Variant != "emulated" {
		t.Fatalf("place --allow-emulated = %d %+v\n%s", rc, res, errOut)
	}
	if !strings.Contains(res.Explain, "allow_emulated: true") ||
		!strings.Contains(res.Explain, "decision: PLACED on "+idB+" via emulated (tier emulated, emulated true)") {
		t.Fatalf("explain:\n%s", res.Explain)
	}
	if n := len(b.instances()); n != 1 {
		t.Fatalf("B holds %d instances, want 1", n)
	}
	if got := b.find("host.place.ok", map[string]any{"decision_id": res.DecisionID}); len(got) != 1 {
		t.Fatalf("B's place records: %+v", b.find("host.place.ok", nil))
	}
}
