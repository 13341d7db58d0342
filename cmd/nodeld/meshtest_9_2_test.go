package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/plane"
)

// placeJSON places through name's operator socket (ctl --json place) and
// decodes the controller's result, whatever the exit status.
func (mn *mnode) placeJSON(args ...string) (controllerPlaceResult, int, string) {
	t := mn.m.t
	t.Helper()
	out, errOut, rc := runCtl(t, append([]string{"--socket", mn.socket(), "--json", "place"}, args...)...)
	var res controllerPlaceResult
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
	pkgDir, anchor := signedEchoPackage(t)
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

	// A chained the decision and the placement under one id.
	ds := a.find(plane.KindDecision, nil)
	if len(ds) == 0 {
		t.Fatal("A chained no decision")
	}
	var decided bool
	for _, e := range a.entries() {
		if e.Kind == plane.KindDecision && strings.Contains(mustJSON(t, e.Payload), idB) {
			decided = true
		}
	}
	if !decided || len(a.find(plane.KindPlaced, map[string]any{"decision_id": dec, "node": idB})) != 1 {
		t.Fatalf("A's chain: decision naming B %v, placed %v", decided, a.find(plane.KindPlaced, nil))
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
	var ps []placementDoc
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
