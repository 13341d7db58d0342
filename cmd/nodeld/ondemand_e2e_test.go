package main

import (
	"context"
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
	// d, when started, is a consumer like C but not on demand_from.
	d      *mnode
	pkgDir string
}

// odRole replaces the harness's role section.
const odRoleSection = "inference:\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n"

// newODMesh starts A (controller, workload chat of package echo-od on
// demand from demandFrom), B (host, serving chat to C) and C (a role
// port, no model), and waits for A to hear from B.
func newODMesh(t *testing.T, onDemand string, withD bool) *odMesh {
	return newODMeshHold(t, onDemand, withD, "")
}

// newODMeshHold is newODMesh with hold, more keys of the consumers'
// proxy.hold (indented four spaces); max_wait among them replaces the
// harness's 20s.
func newODMeshHold(t *testing.T, onDemand string, withD bool, hold string) *odMesh {
	t.Helper()
	pkgDir, anchor := odPackage(t)
	names := []string{"a", "b", "c"}
	if withD {
		names = append(names, "d")
	}
	m := newMesh(t, names...)
	o := &odMesh{m: m, pkgDir: pkgDir}
	peersOf := func(name string) []peer {
		var ps []peer
		for _, n := range names {
			if n != name && !(n == "c" && name == "d" || n == "d" && name == "c") {
				ps = append(ps, peer{name: n, tier: "paired"})
			}
		}
		return ps
	}
	serveTo := "[c]"
	if withD {
		serveTo = "[c, d]"
	}
	b := m.config("b", peersOf("b"), meshHost(m.node("a").key, anchor))
	// B serves each peer on the mesh defaults (8 requests at once): a held
	// request B refuses over_capacity waits for a slot (proxy.ErrPeerBusy).
	b = strings.Replace(b, odRoleSection, "inference:\n  probe_interval: 100ms\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n      expose: true\n      serve_to: "+serveTo+"\n", 1)
	consumer := func(name string) string {
		holdSection := "proxy:\n  hold:\n    max_wait: 20s\n" + hold
		if strings.Contains(hold, "max_wait:") {
			holdSection = "proxy:\n  hold:\n" + hold
		}
		cfg := m.config(name, peersOf(name), holdSection)
		return strings.Replace(cfg, odRoleSection, odRoleSection+"      use_from: [b]\n", 1)
	}
	a := m.config("a", peersOf("a"), meshController(anchor,
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
	o.c = m.start("c", consumer("c"))
	if withD {
		o.d = m.start("d", consumer("d"))
	}
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

// waitLinked waits until the node's mesh has a link to each of ids.
func (mn *mnode) waitLinked(ids ...string) {
	mn.m.t.Helper()
	waitFor(mn.m.t, mn.name+" to link to "+strings.Join(ids, ", "), func() bool {
		linked := map[string]bool{}
		for _, p := range mn.n.mesh.LinkedPeers() {
			linked[p.ID] = true
		}
		for _, id := range ids {
			if !linked[id] {
				return false
			}
		}
		return true
	})
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

// tickUntil ticks A (the harness's controller ticks by hand) while the
// workload is not cold, until done is closed.
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
// C's role port while the workload is cold (no instance in B's table) is
// held; C demands it of A, A places it on B, and B's instance answers,
// three cold starts in a row. The causality is asserted: each answer is
// B's instance's (its route and echo), B's table holds the instance when
// it comes, and A placed once per cold start. The time from B's instance
// becoming healthy to C's first byte is only logged: its bound (200 ms)
// is BenchmarkOnDemandColdStart's (make bench-cold), not a timed test's.
func TestOnDemandColdStartAcrossTheMesh(t *testing.T) {
	t.Parallel()
	o := newODMesh(t, "        max_wait: 20s\n        idle_after: 2s\n        min_residency: 1s\n        demand_from: [c]\n", false)
	idB := o.m.id("b")
	base := o.c.roleBase()
	const runs = 3
	var lat []time.Duration
	for i := range runs {
		if _, ok := o.b.n.table.Resolve("chat"); ok {
			t.Fatalf("cold start %d: B's table resolves chat before the request", i)
		}
		healthy, healthyAt := o.localReady()
		got := make(chan odAnswer, 1)
		go func() { got <- postOD(base, fmt.Sprintf("cold %d", i)) }()
		served := make(chan struct{})
		var ans odAnswer
		go func() { ans = <-got; close(served) }()
		o.tickUntil("the held request to be answered", served)
		if ans.err != nil || ans.code != 200 || ans.route != idB || !strings.Contains(ans.body, fmt.Sprintf("echo: cold %d", i)) {
			t.Fatalf("C's answer %d: %+v\n%s", i, ans, o.dump())
		}
		// B answered from its instance, so its table holds it (nothing
		// unloads it before the cluster's clock is advanced below).
		if _, ok := o.b.n.table.Resolve("chat"); !ok {
			t.Fatalf("cold start %d: answered by B, but B's table does not resolve chat\n%s", i, o.dump())
		}
		select {
		case <-healthy:
		case <-time.After(waitTimeout):
			t.Fatal("B's table never resolved chat")
		}
		lat = append(lat, ans.first.Sub(*healthyAt))
		if n := o.placedCount(); n != i+1 {
			t.Fatalf("cold start %d: A placed %d times", i, n)
		}
		if i == runs-1 {
			break
		}
		// Idle past idle_after (on the cluster's clock): A unloads it.
		advanced := time.Duration(0)
		waitFor(t, "A to unload the idle instance", func() bool {
			if advanced > time.Minute {
				t.Fatalf("not unloaded after %s idle\n%s", advanced, o.dump())
			}
			o.m.clock.Advance(time.Second)
			advanced += time.Second
			o.a.tick()
			_, ok := o.b.n.table.Resolve("chat")
			return o.standbyState() == plane.OnDemandCold && len(o.b.n.host.Status().Instances) == 0 && !ok
		})
		waitFor(t, "C to see the role cold", func() bool {
			_, ok := o.c.n.table.Resolve("chat")
			sbs := o.c.n.table.Standbys("chat")
			return !ok && len(sbs) == 1 && sbs[0].State == plane.OnDemandCold
		})
	}
	slices.Sort(lat)
	t.Logf("healthy on B to first byte on C over %d cold starts (see BenchmarkOnDemandColdStart): median %s, all %v",
		runs, lat[len(lat)/2], lat)
}

// counter sums the samples of metric name in the node's registry whose
// labels include labels.
func (mn *mnode) counter(name string, labels map[string]string) float64 {
	mn.m.t.Helper()
	mfs, err := mn.reg.Gather()
	if err != nil {
		mn.m.t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, mt := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range mt.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case mt.GetCounter() != nil:
				sum += mt.GetCounter().GetValue()
			case mt.GetGauge() != nil:
				sum += mt.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// TestOnDemandFiftyHeldOneColdStart (issue 24 acceptance 2 and 6): 50
// requests on C's role port while the workload is cold are all answered
// 200 by one instance after one cold start (one plane.placed, one
// nodeld_plane_cold_starts_total), on the mesh's default in-flight
// limit (8 per peer): those B refuses over_capacity when they are
// released together wait for a slot instead of getting 429. D, a consumer not on demand_from,
// gets no standby: its request is answered 503 no_instance at once, and
// a demand call it makes anyway is refused demand_not_allowed, counted,
// and places nothing.
func TestOnDemandFiftyHeldOneColdStart(t *testing.T) {
	t.Parallel()
	o := newODMesh(t, "        max_wait: 20s\n        demand_from: [c]\n", true)
	idA, idB := o.m.id("a"), o.m.id("b")

	// D: no standby, today's 503 no_instance at once, and no demand.
	if sbs := o.d.n.table.Standbys("chat"); len(sbs) != 0 {
		t.Fatalf("D, not on demand_from, has standbys %+v", sbs)
	}
	start := time.Now()
	if ans := postOD(o.d.roleBase(), "not allowed"); ans.err != nil || ans.code != 503 || !strings.Contains(ans.body, `"code":"no_instance"`) {
		t.Fatalf("D's answer: %+v", ans)
	} else if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("D's 503 took %s", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := o.d.n.demand.Client.Call(ctx, idA, "chat"); err == nil || !strings.Contains(err.Error(), "not_allowed") {
		t.Fatalf("D's demand call: %v", err)
	}
	if n := o.a.counter("nodeld_demand_served_total", map[string]string{"outcome": "not_allowed"}); n != 1 {
		t.Fatalf("A counted %v refused demands", n)
	}
	o.a.tick()
	if st := o.standbyState(); st != plane.OnDemandCold || o.placedCount() != 0 {
		t.Fatalf("after D's demand: %s, %d placed\n%s", st, o.placedCount(), o.dump())
	}

	// C: 50 at once, held, one cold start.
	const n = 50
	base := o.c.roleBase()
	answers := make(chan odAnswer, n)
	for i := range n {
		go func() { answers <- postOD(base, fmt.Sprintf("held %d", i)) }()
	}
	waitFor(t, "C to hold 50 requests", func() bool {
		return o.c.counter("nodeld_proxy_hold_queue_depth", map[string]string{"role": "chat"}) == n
	})
	all := make(chan struct{})
	var got []odAnswer
	go func() {
		for range n {
			got = append(got, <-answers)
		}
		close(all)
	}()
	o.tickUntil("50 held requests to be answered", all)
	for _, ans := range got {
		if ans.err != nil || ans.code != 200 || ans.route != idB || !strings.Contains(ans.body, "echo: held ") {
			t.Fatalf("an answer: %+v\n%s", ans, o.dump())
		}
	}
	t.Logf("50 held requests answered 200; tries that found B's slots for C taken: %v",
		o.c.counter("nodeld_proxy_hold_busy_retries_total", map[string]string{"role": "chat"}))
	if p, cs := o.placedCount(), o.a.counter("nodeld_plane_cold_starts_total", nil); p != 1 || cs != 1 {
		t.Fatalf("%d placed, %v cold starts\n%s", p, cs, o.dump())
	}
	if is := o.b.n.host.Status().Instances; len(is) != 1 {
		t.Fatalf("B runs %d instances", len(is))
	}
	if n := o.a.counter("nodeld_plane_demands_total", map[string]string{"outcome": "accepted"}); n != 1 {
		t.Fatalf("A accepted %v demands", n)
	}
}

// TestOnDemandControllerRestartWhileStarting (issue 24 acceptance 7): A
// is killed once after it accepted C's demand (before placing), and
// again right after it placed the instance on B (the instance loading);
// each time it comes back from its data dir. The held request on C is
// answered by B's one instance: no second copy was placed. A restart
// while the instance is idle keeps it, places none, and C is served.
func TestOnDemandControllerRestartWhileStarting(t *testing.T) {
	t.Parallel()
	o := newODMesh(t, "        max_wait: 20s\n        demand_from: [c]\n", false)
	idB := o.m.id("b")
	got := make(chan odAnswer, 1)
	go func() { got <- postOD(o.c.roleBase(), "across restarts") }()
	waitFor(t, "A to accept C's demand", func() bool { return o.standbyState() == plane.OnDemandStarting })
	o.a.restart()
	// The restarted controller offers the workload at once (before its
	// first tick), as starting: its standby is not withdrawn from C.
	if st := o.standbyState(); st != plane.OnDemandStarting {
		t.Fatalf("A after its restart: %q", st)
	}
	// Its first tick (the loop's comes a tick after the start) finds B
	// linked.
	o.a.waitLinked(idB)
	o.a.tick()
	if o.placedCount() != 1 {
		t.Fatalf("A's first tick after the restart placed %d\n%s", o.placedCount(), o.dump())
	}
	o.a.restart()
	served := make(chan struct{})
	var ans odAnswer
	go func() { ans = <-got; close(served) }()
	o.tickUntil("the held request to be answered", served)
	if ans.err != nil || ans.code != 200 || ans.route != idB || !strings.Contains(ans.body, "echo: across restarts") {
		t.Fatalf("C's answer: %+v\n%s", ans, o.dump())
	}
	if o.placedCount() != 1 {
		t.Fatalf("A placed %d\n%s", o.placedCount(), o.dump())
	}
	if is := o.b.n.host.Status().Instances; len(is) != 1 {
		t.Fatalf("B runs %d instances", len(is))
	}

	// Idle (no request within a tick, idle_after not reached), then A
	// restarts: it keeps the one instance and places none.
	waitFor(t, "the instance to be idle", func() bool {
		o.m.clock.Advance(time.Second)
		o.a.tick()
		return o.standbyState() == plane.OnDemandIdle
	})
	o.a.restart()
	o.a.waitLinked(idB)
	o.a.tick()
	o.a.tick()
	if st := o.standbyState(); st != plane.OnDemandIdle && st != plane.OnDemandReady {
		t.Fatalf("A after a restart while idle: %s\n%s", st, o.dump())
	}
	if o.placedCount() != 1 || len(o.b.n.host.Status().Instances) != 1 {
		t.Fatalf("after a restart while idle: %d placed, B runs %d\n%s", o.placedCount(), len(o.b.n.host.Status().Instances), o.dump())
	}
	if ans := postOD(o.c.roleBase(), "after idle"); ans.err != nil || ans.code != 200 || ans.route != idB {
		t.Fatalf("C's answer after A's restart while idle: %+v", ans)
	}
}

// TestOnDemandControllerGoneHeldRequestTimesOut (issue 24 acceptance 7,
// the other way): A accepts C's demand and is killed before it places.
// The held request on C is answered at max_wait with the documented 503
// model_loading and a Retry-After. A, back after that, finds the demand
// lapsed (nobody waits for it any more) and starts nothing.
func TestOnDemandControllerGoneHeldRequestTimesOut(t *testing.T) {
	t.Parallel()
	const maxWait = time.Second
	o := newODMesh(t, "        max_wait: "+maxWait.String()+"\n        demand_from: [c]\n", false)
	got := make(chan odAnswer, 1)
	start := time.Now()
	go func() {
		resp, err := http.Post(o.c.roleBase()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"echo-1","messages":[{"role":"user","content":"too late"}]}`))
		if err != nil {
			got <- odAnswer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- odAnswer{code: resp.StatusCode, route: resp.Header.Get("Retry-After"), body: string(b), first: time.Now(), err: err}
	}()
	waitFor(t, "A to accept C's demand", func() bool { return o.standbyState() == plane.OnDemandStarting })
	o.a.kill()
	ans := <-got
	if ans.err != nil || ans.code != http.StatusServiceUnavailable || !strings.Contains(ans.body, `"code":"model_loading"`) || ans.route == "" {
		t.Fatalf("C's answer (route field holds Retry-After): %+v", ans)
	}
	if waited := ans.first.Sub(start); waited < maxWait || waited > maxWait+5*time.Second {
		t.Fatalf("answered after %s, max_wait %s", waited, maxWait)
	}
	// A comes back past max_wait on its clock: the demand lapsed.
	o.m.clock.Advance(2 * maxWait)
	o.a.run()
	o.a.waitLinked(o.m.id("b"))
	o.a.tick()
	o.a.tick()
	if st, n := o.standbyState(), o.placedCount(); st != plane.OnDemandCold || n != 0 {
		t.Fatalf("A back: %s, %d placed\n%s", st, n, o.dump())
	}
	if is := o.b.n.host.Status().Instances; len(is) != 0 {
		t.Fatalf("B runs %d instances", len(is))
	}
}

// TestOnDemandQueueBoundDisconnectAndDemandFlood (issue 24 acceptance 6):
// with C's hold queue bounded at 3, three requests are held while A has
// not placed yet and a fourth gets 503 queue_full at once; a held client
// that goes away leaves the queue. 1,000 demand calls from C, as fast as
// they go, are coalesced or rate limited: A starts one instance, and its
// chain grows by a bounded count. The two held requests are then answered.
// The flood's calls and the held requests' wait (C's proxy.hold.max_wait
// and the workload's on_demand.max_wait) have floodBudget, not the
// harness's 20 s: under -race on a loaded two-core machine 1,000 demand
// calls can take longer than that (internal/demand's TestDemandFlood took
// 49 s), and the held requests were then refused for their wait or the
// calls for their context, neither of which this test is about.
func TestOnDemandQueueBoundDisconnectAndDemandFlood(t *testing.T) {
	t.Parallel()
	const floodBudget = 3 * time.Minute
	o := newODMeshHold(t, "        max_wait: "+floodBudget.String()+"\n        demand_from: [c]\n", false,
		"    queue: 3\n    max_wait: "+floodBudget.String()+"\n")
	idA, idB := o.m.id("a"), o.m.id("b")
	base := o.c.roleBase()
	depth := func() float64 { return o.c.counter("nodeld_proxy_hold_queue_depth", map[string]string{"role": "chat"}) }

	answers := make(chan odAnswer, 2)
	for i := range 2 {
		go func() { answers <- postOD(base, fmt.Sprintf("kept %d", i)) }()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"model":"echo-1","messages":[{"role":"user","content":"gone"}]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	waitFor(t, "C to hold 3 requests", func() bool { return depth() == 3 })

	start := time.Now()
	full := postOD(base, "one too many")
	if full.err != nil || full.code != http.StatusServiceUnavailable || !strings.Contains(full.body, `"code":"queue_full"`) {
		t.Fatalf("the fourth: %+v", full)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the fourth's 503 took %s", d)
	}
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("the cancelled request was answered")
	}
	waitFor(t, "the client gone to leave C's queue", func() bool { return depth() == 2 })

	// The flood, from C's own key over its link to A.
	before := len(o.a.entries())
	fctx, fcancel := context.WithTimeout(context.Background(), floodBudget)
	defer fcancel()
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 125 {
				state, err := o.c.n.demand.Client.Call(fctx, idA, "chat")
				k := "state " + state
				switch {
				case err == nil:
				case strings.Contains(err.Error(), "rate_limited"):
					k = "rate_limited"
				default:
					k = err.Error()
				}
				mu.Lock()
				codes[k]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	grew := len(o.a.entries()) - before
	t.Logf("1,000 demand calls from C: %v; A's chain grew by %d", codes, grew)
	if grew > 20 {
		t.Errorf("A's chain grew by %d entries for 1,000 demand calls", grew)
	}
	for k := range codes {
		if k != "rate_limited" && !strings.HasPrefix(k, "state ") {
			t.Errorf("a demand call: %s", k)
		}
	}
	if n := o.a.counter("nodeld_plane_demands_total", map[string]string{"outcome": "accepted"}); n != 1 {
		t.Fatalf("A accepted %v demands", n)
	}

	all := make(chan struct{})
	var got []odAnswer
	go func() {
		for range 2 {
			got = append(got, <-answers)
		}
		close(all)
	}()
	o.tickUntil("the two held requests to be answered", all)
	for _, ans := range got {
		if ans.err != nil || ans.code != 200 || ans.route != idB {
			t.Fatalf("a held answer: %+v", ans)
		}
	}
	if n := o.placedCount(); n != 1 {
		t.Fatalf("A placed %d", n)
	}
}
