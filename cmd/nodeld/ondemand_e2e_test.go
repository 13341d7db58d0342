package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

// The on-demand path end to end (issue 24): A runs the controller with an
// on-demand declared workload, B is its only host, C has the role port
// and no model. The nodes are in-process, over real QUIC links on
// loopback; the instance is the echo-llm process, loading for odLoadDelay.

// odLoadDelay is how long the on-demand echo-llm "loads its model".
const odLoadDelay = 300 * time.Millisecond

// odPackage is the light echo-llm package the on-demand workload runs,
// with a load delay: /health answers 503 until it has passed.
func odPackage(t *testing.T) (dir, anchor string) {
	t.Helper()
	script := "#!/bin/sh\nexec '" + echoBinary(t) + "' \"$@\" --load-delay " + odLoadDelay.String() + "\n"
	return meshPackage(t, "echo-od", echoManifest("echo-od", "start.sh", defaultVariant), map[string]string{"start.sh": script})
}

// odMesh is the three nodes of the on-demand tests, running.
type odMesh struct {
	m       *meshT
	a, b, c *mnode
	pkgDir  string
}

// odRole replaces the harness's role section.
const odRoleSection = "inference:\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n"

// newODMesh starts A (controller, workload chat of package echo-od on
// demand from demandFrom), B (host, serving chat to C) and C (a role
// port, no model), and waits for A to hear from B.
func newODMesh(t *testing.T, onDemand string) *odMesh {
	t.Helper()
	pkgDir, anchor := odPackage(t)
	m := newMesh(t, "a", "b", "c")
	o := &odMesh{m: m, pkgDir: pkgDir}
	b := m.config("b", []peer{{name: "a", tier: "paired"}, {name: "c", tier: "paired"}}, meshHost(m.node("a").key, anchor))
	b = strings.Replace(b, odRoleSection, "inference:\n  probe_interval: 100ms\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n      expose: true\n      serve_to: [c]\n", 1)
	c := m.config("c", []peer{{name: "a", tier: "paired"}, {name: "b", tier: "paired"}},
		"proxy:\n  hold:\n    max_wait: 20s\n")
	c = strings.Replace(c, odRoleSection, odRoleSection+"      use_from: [b]\n", 1)
	a := m.config("a", []peer{{name: "b", tier: "paired"}, {name: "c", tier: "paired"}}, meshController(anchor,
		"  workloads:\n    - name: chat\n      package: echo-od\n      on_demand:\n        enabled: true\n"+onDemand))
	// The declared package goes into A's store before A starts.
	an := m.node("a")
	if err := os.WriteFile(an.cfgPath, []byte(a), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, rc := runCLI(t, "package", "add", "--config", an.cfgPath, pkgDir); rc != 0 {
		t.Fatalf("package add = %d\n%s\n%s", rc, out, errOut)
	}
	o.b = m.start("b", b)
	o.c = m.start("c", c)
	o.a = m.start("a", a)
	o.a.waitAlive(m.id("b"))
	waitFor(t, "C to learn A's standby of chat", func() bool {
		o.a.tick()
		return len(o.c.n.table.Standbys("chat")) == 1
	})
	return o
}

// dump describes the on-demand path's state for a failure.
func (o *odMesh) dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "A standby: %+v\n", o.a.ctrl().Standby())
	for _, p := range o.a.ctrl().Placements() {
		fmt.Fprintf(&b, "A placement: %+v\n", p)
	}
	fmt.Fprintf(&b, "B host: %+v\n", o.b.n.host.Status())
	fmt.Fprintf(&b, "C standbys: %+v\n", o.c.n.table.Standbys("chat"))
	t, ok := o.c.n.table.Resolve("chat")
	fmt.Fprintf(&b, "C resolves: %+v %v\n", t, ok)
	for _, e := range o.a.entries() {
		fmt.Fprintf(&b, "A chain: %s %v\n", e.Kind, e.Payload)
	}
	return b.String()
}

// roleBase is the node's role port for chat.
func (mn *mnode) roleBase() string {
	st := mn.n.status().(*operator.StatusDoc)
	for _, r := range st.Roles {
		if r.Name == "chat" {
			return "http://" + r.Listen
		}
	}
	mn.m.t.Fatalf("node %s has no role chat", mn.name)
	return ""
}

// odAnswer is one request's outcome.
type odAnswer struct {
	code  int
	route string
	body  string
	// first is when the response's headers came (its first byte).
	first time.Time
	err   error
}

// postOD sends a chat request to base and reads the answer.
func postOD(base, content string) odAnswer {
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"echo-1","messages":[{"role":"user","content":"`+content+`"}]}`))
	if err != nil {
		return odAnswer{err: err}
	}
	first := time.Now()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return odAnswer{code: resp.StatusCode, route: resp.Header.Get("X-Nodeld-Route"), body: string(b), first: first, err: err}
}

// standbyState is A's on-demand state of workload chat.
func (o *odMesh) standbyState() string {
	for _, s := range o.a.ctrl().Standby() {
		if s.Workload == "chat" {
			return s.State
		}
	}
	return ""
}

// tickUntilServed ticks A (the harness's controller ticks by hand) until
// done is closed.
func (o *odMesh) tickUntil(what string, done <-chan struct{}) {
	o.m.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case <-done:
			return
		case <-deadline:
			o.m.t.Fatalf("%s: timed out; A's standby %+v, placements %+v, C's standbys %+v, A's demand metrics %v", what,
				o.a.ctrl().Standby(), o.a.ctrl().Placements(), o.c.n.table.Standbys("chat"), o.a.find("", nil)[max(0, len(o.a.find("", nil))-8):])
		default:
		}
		if o.standbyState() != plane.OnDemandCold {
			o.a.tick()
		}
		select {
		case <-done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// localReady closes the returned channel the first time B's table
// resolves chat to its own instance, and reports when.
func (o *odMesh) localReady() (<-chan struct{}, *time.Time) {
	tbl := o.b.n.table
	ch, cancel := tbl.Subscribe()
	done := make(chan struct{})
	var at time.Time
	go func() {
		defer cancel()
		for {
			if _, ok := tbl.Resolve("chat"); ok {
				at = time.Now()
				close(done)
				return
			}
			select {
			case <-ch:
			case <-time.After(waitTimeout):
				return
			}
		}
	}()
	return done, &at
}

// placedCount is how many plane.placed records A chained for workload chat.
func (o *odMesh) placedCount() int {
	return len(o.a.find(plane.KindPlaced, nil))
}

// TestOnDemandColdStartAcrossTheMesh (issue 24 acceptance 1): a request on
// C's role port while the workload is cold is held; C demands it of A,
// A places it on B, and B's instance answers. The time from B's instance
// becoming healthy (B's table resolving it) to C's first byte is
// reported.
func TestOnDemandColdStartAcrossTheMesh(t *testing.T) {
	t.Parallel()
	o := newODMesh(t, "        max_wait: 20s\n        demand_from: [c]\n")
	idB := o.m.id("b")
	base := o.c.roleBase()
	healthy, healthyAt := o.localReady()

	got := make(chan odAnswer, 1)
	go func() { got <- postOD(base, "cold") }()
	served := make(chan struct{})
	var ans odAnswer
	go func() { ans = <-got; close(served) }()
	o.tickUntil("the held request to be answered", served)
	if ans.err != nil || ans.code != 200 || ans.route != idB || !strings.Contains(ans.body, "echo: cold") {
		t.Fatalf("C's answer: %+v\n%s", ans, o.dump())
	}
	<-healthy
	t.Logf("healthy on B to first byte on C: %s", ans.first.Sub(*healthyAt))
	if n := o.placedCount(); n != 1 {
		t.Fatalf("A placed %d times", n)
	}
}

var _ = sync.Mutex{}
var _ = slices.Contains[[]string]
