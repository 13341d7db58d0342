package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/operator"
)

// controllerWait bounds the waits on the controller's work (describes,
// places that fetch and start a package, reschedules after a backoff):
// generous, so that a machine loaded by other work is not taken for a
// failure; a working controller is done in seconds.
const controllerWait = 90 * time.Second

// waitLong is waitFor within controllerWait, polling less often (some
// conditions run a nodeld ctl process).
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(controllerWait)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// makeKey makes a node's key in dataDir before its first start, so that
// other nodes' configs can name it, and returns the public key hex.
func makeKey(t testing.TB, dataDir string) string {
	t.Helper()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	id, _, err := identity.LoadOrGenerate(identity.KeyPath(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	return id.PublicKeyHex()
}

// ctlCluster describes the nodes of a controller test: their data dirs,
// mesh addresses and keys, made before any starts.
type ctlCluster struct {
	dirs, addrs, keys map[string]string
	// tofu names the nodes whose configs give their peers no key: each
	// pins the first key it sees at a peer's address.
	tofu map[string]bool
}

func newCtlCluster(t *testing.T, names ...string) *ctlCluster {
	t.Helper()
	root := t.TempDir()
	c := &ctlCluster{dirs: map[string]string{}, addrs: map[string]string{}, keys: map[string]string{}, tofu: map[string]bool{}}
	for _, n := range names {
		c.dirs[n] = filepath.Join(root, n)
		c.addrs[n] = freeUDPAddr(t)
		c.keys[n] = makeKey(t, c.dirs[n])
	}
	return c
}

// config renders node name's config: its mesh peers (name -> tier) with
// their keys, and the rest of the file as given. The data dir is left as
// the one %s of startNodeAt, or filled in when dataDir is true.
func (c *ctlCluster) config(name string, peers map[string]string, rest string, dataDir bool) string {
	var b strings.Builder
	dd := "%s"
	if dataDir {
		dd = c.dirs[name]
	}
	fmt.Fprintf(&b, "node:\n  name: %s\n  data_dir: %s\nlog:\n  level: debug\n  format: json\nadmin:\n  listen: 127.0.0.1:0\n", name, dd)
	// A generous liveness timeout: a link must not be taken for dead while
	// -race and parallel tests starve the nodes (the controller's own
	// dead_after does not wait for it: a describe that times out is no
	// contact).
	fmt.Fprintf(&b, "mesh:\n  listen: %s\n  keepalive: 1s\n  liveness_timeout: 5s\n  peers:\n", c.addrs[name])
	for _, p := range []string{"a", "b", "c"} {
		tier, ok := peers[p]
		switch {
		case ok && c.tofu[name]:
			fmt.Fprintf(&b, "    - name: %s\n      addr: %s\n      tier: %s\n", p, c.addrs[p], tier)
		case ok:
			fmt.Fprintf(&b, "    - name: %s\n      addr: %s\n      key: %s\n      tier: %s\n", p, c.addrs[p], c.keys[p], tier)
		}
	}
	b.WriteString(rest)
	return b.String()
}

// controllerSection is a controller that places kind inference on paired
// nodes, with the test's short tick, dead_after and describe timeout.
func controllerSection(anchor, tick, deadAfter, describe string) string {
	return fmt.Sprintf(`controller:
  enabled: true
  tick: %s
  dead_after: %s
  retry_backoff: 1s
  describe_timeout: %s
  trust_anchors: [%s]
  policy:
    kinds:
      inference: {min_tier: paired}
`, tick, deadAfter, describe, anchor)
}

// hostSection lets the controller's key place packages of anchor here.
func hostSection(controller, anchor string) string {
	return fmt.Sprintf("host:\n  enabled: true\n  controllers: [%s]\n  trust_anchors: [%s]\n", controller, anchor)
}

// ctlJSON runs nodeld ctl --json against a socket and decodes its result.
func ctlJSON(t *testing.T, socket string, v any, args ...string) {
	t.Helper()
	out, errOut, rc := runCtl(t, append([]string{"--socket", socket, "--json"}, args...)...)
	if rc != 0 {
		t.Fatalf("ctl %v = %d: %s", args, rc, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("ctl %v: %v\n%s", args, err, out)
	}
}

// kindCounts counts the entries of each kind in a chain file.
func kindCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, k := range chainKinds(t, path) {
		out[k]++
	}
	return out
}

func postChat(t *testing.T, base, content string) (int, string, string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"`+content+`"}]}`))
	if err != nil {
		t.Fatalf("post to %s: %v", base, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, resp.Header.Get("X-Nodeld-Route"), b.String()
}

// TestControllerPlacesWhereTheEngineChooses: three in-process nodes over
// QUIC on loopback. A runs the controller; B is a workload host A may
// place on (paired); C is known to A as discovered only, below the
// policy's paired floor, and uses role chat from B. A dry run explains
// and dispatches nothing; a place without a node goes to B (the engine's
// choice), and C is served by it; explain, placements, nodes and
// /v1/status read the controller; a place pinned to C is refused with the
// explanation. A's config gives its peers no key, as the shipped cluster
// configs do: they become targets once pinned on first contact.
func TestControllerPlacesWhereTheEngineChooses(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshEchoPackage(t)
	cl := newCtlCluster(t, "a", "b", "c")
	cl.tofu["a"] = true
	b := startNodeAt(t, cl.dirs["b"], cl.config("b", map[string]string{"a": "paired", "c": "paired"},
		"inference:\n  probe_interval: 300ms\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n      expose: true\n      serve_to: [c]\n"+
			hostSection(cl.keys["a"], anchor), false), nil)
	c := startNodeAt(t, cl.dirs["c"], cl.config("c", map[string]string{"a": "paired", "b": "paired"},
		"inference:\n  probe_interval: 300ms\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n      use_from: [b]\n", false), nil)
	a := startNodeAt(t, cl.dirs["a"], cl.config("a", map[string]string{"b": "paired", "c": "discovered"},
		"inference:\n  roles:\n    - name: other\n      listen: 127.0.0.1:0\n"+controllerSection(anchor, "200ms", "5s", "3s"), false), nil)
	sock := a.n.config().SocketPath()
	idB, idC := b.n.id.ID(), c.n.id.ID()

	var nodes []operator.NodeDoc
	waitLong(t, "A's controller to hear from B and C", func() bool {
		ctlJSON(t, sock, &nodes, "nodes")
		alive := 0
		for _, n := range nodes {
			if n.Liveness == "alive" && n.HasFacts {
				alive++
			}
		}
		return alive == 2
	})

	// A dry run: explained, chained, nothing dispatched.
	out, errOut, rc := runCtl(t, "--socket", sock, "place", "--dry-run", pkgDir)
	if rc != 0 || !strings.Contains(out, "decision: PLACED on "+idB) || !strings.Contains(out, "nothing dispatched") {
		t.Fatalf("dry run = %d\n%s\n%s", rc, out, errOut)
	}
	dryID := strings.TrimPrefix(lineWith(out, "decision_id: "), "decision_id: ")
	if n := kindCounts(t, a.chain.Path())["dispatch.decision"]; n != 0 {
		t.Fatalf("a dry run dispatched: %d dispatch decisions chained", n)
	}
	if hs := b.n.host.Status(); len(hs.Instances) != 0 || len(hs.InFlight) != 0 {
		t.Fatalf("B after a dry run: %+v", hs)
	}

	// The engine chooses: B, C being below the paired floor.
	out, placedID := placeSettled(t, sock, idB, pkgDir)
	for _, want := range []string{idC + " rejected", "trust: tier discovered below required paired"} {
		if !strings.Contains(out, want) {
			t.Errorf("explanation lacks %q:\n%s", want, out)
		}
	}

	// C uses it through the mesh.
	st := func() *operator.StatusDoc { return c.n.status().(*operator.StatusDoc) }
	waitLong(t, "C to resolve chat to B", func() bool { return st().Roles[0].Resolved == "remote "+idB })
	code, route, body := postChat(t, "http://"+st().Roles[0].Listen, "placed by the engine")
	if code != 200 || route != idB || !strings.Contains(body, "echo: placed by the engine") {
		t.Fatalf("C's role port: %d %s %s", code, route, body)
	}

	// explain, by id, for the placement and for the dry run.
	out, _, rc = runCtl(t, "--socket", sock, "explain", placedID)
	if rc != 0 || !strings.Contains(out, "decision_id: "+placedID) || !strings.Contains(out, "1. "+idB+" via default: ") {
		t.Fatalf("explain placed = %d\n%s", rc, out)
	}
	// A dry run, by the prefix ctl placements shows.
	out, _, rc = runCtl(t, "--socket", sock, "explain", dryID[:16])
	if rc != 0 || !strings.Contains(out, "decision_id: "+dryID) || strings.Contains(out, "dispatch:") {
		t.Fatalf("explain dry run = %d\n%s", rc, out)
	}
	if _, errOut, rc := runCtl(t, "--socket", sock, "explain", strings.Repeat("ab", 32)); rc != 1 || !strings.Contains(errOut, operator.CodeUnknownDecision) {
		t.Fatalf("explain of an unknown decision = %d %q", rc, errOut)
	}

	// placements and nodes, as JSON.
	var ps []operator.PlacementDoc
	ctlJSON(t, sock, &ps, "placements")
	if len(ps) != 1 || ps[0].DecisionID != placedID || ps[0].Node != idB || ps[0].Life != "placed" || ps[0].Package != "echo-llm" {
		t.Fatalf("placements = %+v", ps)
	}
	waitLong(t, "the placement to be mirrored as running", func() bool {
		ctlJSON(t, sock, &ps, "placements")
		return len(ps) == 1 && ps[0].HostState == "running"
	})
	byName := map[string]operator.NodeDoc{}
	waitLong(t, "A's view of B and C after the place", func() bool {
		ctlJSON(t, sock, &nodes, "nodes")
		for _, n := range nodes {
			byName[n.Name] = n
		}
		b, c := byName["b"], byName["c"]
		return b.ID == idB && b.Tier == "paired" && b.Liveness == "alive" && b.Instances == 1 && b.Placements == 1 && b.MemTotal > 0 &&
			c.ID == idC && c.Tier == "discovered" && c.Liveness == "alive" && c.Placements == 0
	})
	out, _, rc = runCtl(t, "--socket", sock, "nodes")
	if rc != 0 || !strings.Contains(out, "LIVENESS") || !strings.Contains(out, idB) {
		t.Errorf("nodes = %d\n%s", rc, out)
	}

	// /v1/status shows the controller.
	waitLong(t, "A's status to show the controller", func() bool {
		ct := a.n.status().(*operator.StatusDoc).Controller
		return ct != nil && ct.TargetsByLiveness["alive"] == 2 && ct.PlacementsByLife["placed"] == 1 && ct.Unsettled == 0 && len(ct.Targets) == 2
	})

	// nodeld status prints it; /metrics has the controller's metrics.
	var sb strings.Builder
	printStatus(&sb, a.n.status().(*operator.StatusDoc))
	if st := sb.String(); !strings.Contains(st, "control  2 targets (") || !strings.Contains(st, "placements 1 placed, 0 unsettled") {
		t.Errorf("nodeld status:\n%s", sb.String())
	}
	code, metrics := httpGet(t, "http://"+a.n.admin.Addr().String()+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	promtoolCheck(t, metrics)
	// (placed, or unsettled then adopted on a starved link: see placeSettled)
	for _, want := range []string{`nodeld_plane_placements_total{outcome="dry_run"} 1`, `nodeld_plane_placements_total{outcome=`,
		`nodeld_plane_dispatch_attempts_total{outcome=`, `nodeld_plane_nodes{liveness="alive"}`, "nodeld_plane_unsettled_decisions 0",
		"nodeld_plane_tick_duration_seconds_count"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// A directory that is no package changes nothing.
	if out, errOut, rc := runCtl(t, "--socket", sock, "place", t.TempDir()); rc != 1 || !strings.Contains(errOut, "place:") {
		t.Fatalf("place of an empty directory = %d\n%s\n%s", rc, out, errOut)
	}

	// Pinned to C, below the floor: refused, with the explanation.
	out, errOut, rc = runCtl(t, "--socket", sock, "place", "c", pkgDir)
	if rc != 1 || !strings.Contains(errOut, operator.CodeUnplaceable) || !strings.Contains(out, "UNPLACEABLE (pinned node "+idC) {
		t.Fatalf("place pinned to c = %d\n%s\n%s", rc, out, errOut)
	}
	if hs := c.n.host.Status(); len(hs.Instances) != 0 {
		t.Fatalf("C holds an instance: %+v", hs.Instances)
	}
	// The dry run, the place (again if it went unsettled and was
	// abandoned) and the pin, each chained; one placement made.
	if kinds := kindCounts(t, a.chain.Path()); kinds["plane.decision"] < 3 || kinds["plane.placed"]+kinds["plane.adopted"] != 1 {
		t.Errorf("A's chain: %v", kinds)
	}
}

// placeSettled runs a ctl place through the controller and returns its
// output and decision id once the decision placed on node. A place that
// went without an answer exits 3 (unsettled; a machine loaded by other
// work can starve a link mid-place): the controller settles it on a later
// tick, as the operator is told to check before retrying. Settled on
// node, it is the placement; abandoned (the node never held it), the
// place is tried again; settled on the next candidate, that instance is
// unloaded through the controller and the place tried again: at most
// three places in all.
func placeSettled(t *testing.T, sock, node string, args ...string) (string, string) {
	t.Helper()
	for range 3 {
		out, errOut, rc := runCtl(t, append([]string{"--socket", sock, "place"}, args...)...)
		id := strings.TrimPrefix(lineWith(out, "decision_id: "), "decision_id: ")
		if rc == 0 && strings.Contains(out, " on "+node+": ") {
			return out, id
		}
		if rc != 3 || !strings.Contains(out, "unsettled:") || id == "" {
			t.Fatalf("place %v = %d, want placed on %s\n%s\n%s", args, rc, node, out, errOut)
		}
		t.Logf("place went unsettled; waiting for the controller to settle it:\n%s", out)
		var settled *operator.PlacementDoc
		waitLong(t, "the unsettled decision to be settled", func() bool {
			var ps []operator.PlacementDoc
			ctlJSON(t, sock, &ps, "placements")
			for _, p := range ps {
				if p.DecisionID == id {
					if p.Life == "placed" {
						settled = &p
						return true
					}
					return false
				}
			}
			return true // abandoned: nothing was placed
		})
		switch {
		case settled == nil:
		case settled.Node == node:
			return out, id
		default:
			if o, e, rc := runCtl(t, "--socket", sock, "unload", settled.Node, settled.InstanceID); rc != 0 {
				t.Fatalf("unload of the instance settled on %s = %d %q %q", settled.Node, rc, o, e)
			}
		}
	}
	t.Fatalf("place %v: three places went unsettled and did not land on %s", args, node)
	return "", ""
}

// lineWith returns the first line of out that starts with prefix.
func lineWith(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestControllerReloadAppliesTargets: a reload applies the controller's
// targets live. A runs the controller and a host of its own (the self
// target, pinned); B is a paired host. Lowering B to discovered demotes it
// (it stays known, with its placement, and new work goes elsewhere);
// removing B from mesh.peers drops its link, so after dead_after its
// placement is lost and moves to A; turning the controller off is refused
// (a restart), keeping everything as it was.
func TestControllerReloadAppliesTargets(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshEchoPackage(t)
	cl := newCtlCluster(t, "a", "b")
	b := startNodeAt(t, cl.dirs["b"], cl.config("b", map[string]string{"a": "paired"},
		"inference:\n  probe_interval: 300ms\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n"+hostSection(cl.keys["a"], anchor), false), nil)
	// A's host lists no controller: running the controller makes A one of
	// its own host.
	cfgA := func(peers map[string]string, controller string) string {
		return cl.config("a", peers, "inference:\n  probe_interval: 300ms\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n"+
			"host:\n  enabled: true\n  trust_anchors: ["+anchor+"]\n"+controller, false)
	}
	// dead_after well above a describe's timeout: a node starved by a
	// loaded machine must not be taken for dead while it still answers.
	ctrl := controllerSection(anchor, "200ms", "6s", "2s")
	a := startNodeAt(t, cl.dirs["a"], cfgA(map[string]string{"b": "paired"}, ctrl), nil)
	sock := a.n.config().SocketPath()
	idA, idB := a.n.id.ID(), b.n.id.ID()
	nodesByName := func() map[string]operator.NodeDoc {
		var ns []operator.NodeDoc
		ctlJSON(t, sock, &ns, "nodes")
		m := map[string]operator.NodeDoc{}
		for _, n := range ns {
			m[n.Name] = n
		}
		return m
	}
	waitLong(t, "A's controller to hear from B and itself", func() bool {
		m := nodesByName()
		return m["b"].Liveness == "alive" && m["self"].Liveness == "alive" && m["self"].Tier == "pinned"
	})
	_, onB := placeSettled(t, sock, idB, "--avoid", "self", pkgDir)

	// B lowered to discovered: demoted, still known with its placement;
	// a new place goes to A even when it prefers B.
	a.rewrite(cfgA(map[string]string{"b": "discovered"}, ctrl))
	a.n.reloader.Reload()
	if a.reloadGauge() != 1 {
		t.Fatalf("reload refused: %s", a.n.status().(*operator.StatusDoc).Config.LastReloadError)
	}
	waitLong(t, "B to be demoted", func() bool { return nodesByName()["b"].Tier == "discovered" })
	out, _, rc := runCtl(t, "--socket", sock, "place", "--dry-run", "--prefer", "b", pkgDir)
	if rc != 0 || !strings.Contains(out, "would place on "+idA) || !strings.Contains(out, "trust: tier discovered below required paired") {
		t.Fatalf("dry run after the demotion = %d\n%s", rc, out)
	}
	var ps []operator.PlacementDoc
	ctlJSON(t, sock, &ps, "placements")
	if len(ps) != 1 || ps[0].DecisionID != onB || ps[0].Life != "placed" {
		t.Fatalf("placements after the demotion = %+v", ps)
	}

	// The controller cannot be turned off by a reload.
	a.rewrite(cfgA(map[string]string{"b": "discovered"}, ""))
	a.n.reloader.Reload()
	if a.reloadGauge() != 0 || !strings.Contains(a.n.status().(*operator.StatusDoc).Config.LastReloadError, "controller.enabled changes only with a restart") {
		t.Fatalf("turning the controller off: gauge %v, %q", a.reloadGauge(), a.n.status().(*operator.StatusDoc).Config.LastReloadError)
	}

	// B removed: its link goes, and after dead_after its placement moves
	// to A.
	a.rewrite(cfgA(map[string]string{}, ctrl))
	a.n.reloader.Reload()
	if a.reloadGauge() != 1 {
		t.Fatalf("reload refused: %s", a.n.status().(*operator.StatusDoc).Config.LastReloadError)
	}
	waitLong(t, "B's placement to move to A", func() bool {
		ctlJSON(t, sock, &ps, "placements")
		for _, p := range ps {
			if p.Replaces == onB && p.Node == idA && p.Life == "placed" {
				return true
			}
		}
		return false
	})
	if m := nodesByName(); m["b"].ID != "" && m["b"].Liveness != "dead" {
		t.Errorf("removed B = %+v, want dead (known while it holds the replaced copy)", m["b"])
	}
	waitLong(t, "the move to be chained", func() bool { return kindCounts(t, a.chain.Path())["plane.migrate"] == 1 })
}

// planeEntries returns the controller's chain entries as text, for
// failure messages.
func planeEntries(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, `"source":"plane"`) {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// chatTrio is three nodeld processes on loopback: A runs the controller
// (trioTick, trioDeadAfter, trioDescribe) with workload chat declared
// (echo-llm, put in A's package store before A starts) and uses role chat
// from B and C, hosts that serve it to A.
type chatTrio struct {
	cl    *ctlCluster
	cfgs  map[string]string // node name -> its config
	procs map[string]*proc  // node name -> its process
	ids   map[string]string // node id -> name
	names map[string]string // name -> node id
}

// The controller timing of a chatTrio. trioDescribe bounds a tick's
// describes: below a tick, so that a dead node is found within
// dead_after + 2 ticks of its death.
const (
	trioTick      = time.Second
	trioDeadAfter = 2 * time.Second
	trioDescribe  = 400 * time.Millisecond
)

// startChatTrio starts B and C, then A with aArgs, and waits until the
// three are ready. With aHosts, A hosts workloads too and chat avoids it
// (avoid: [self]): A's fleet then holds the three nodes, and chat still
// runs on B or C.
func startChatTrio(t *testing.T, aHosts bool, aArgs ...string) *chatTrio {
	t.Helper()
	pkgDir, anchor := meshEchoPackage(t)
	cl := newCtlCluster(t, "a", "b", "c")
	workloads, hostA := "  workloads:\n    - name: chat\n      package: echo-llm\n", ""
	if aHosts {
		workloads += "      avoid: [self]\n"
		hostA = hostSection(cl.keys["a"], anchor)
	}
	tr := &chatTrio{cl: cl, procs: map[string]*proc{}, ids: map[string]string{}, names: map[string]string{}}
	tr.cfgs = map[string]string{
		"a": cl.config("a", map[string]string{"b": "paired", "c": "paired"},
			"inference:\n  probe_interval: 300ms\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n      use_from: [b, c]\n"+
				controllerSection(anchor, trioTick.String(), trioDeadAfter.String(), trioDescribe.String())+workloads+hostA, true),
	}
	for _, n := range []string{"b", "c"} {
		tr.cfgs[n] = cl.config(n, map[string]string{"a": "paired"},
			"inference:\n  probe_interval: 300ms\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n      expose: true\n      serve_to: [a]\n"+
				hostSection(cl.keys["a"], anchor), true)
	}
	cfgFileA := filepath.Join(t.TempDir(), "a.yaml")
	if err := os.WriteFile(cfgFileA, []byte(tr.cfgs["a"]), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, rc := runCLI(t, "package", "add", "--config", cfgFileA, pkgDir); rc != 0 {
		t.Fatalf("package add = %d %q %q", rc, out, errOut)
	}
	tr.procs["b"] = startDaemon(t, cl.dirs["b"], tr.cfgs["b"])
	tr.procs["c"] = startDaemon(t, cl.dirs["c"], tr.cfgs["c"])
	tr.procs["a"] = startDaemon(t, cl.dirs["a"], tr.cfgs["a"], aArgs...)
	for n, d := range tr.procs {
		d.waitReady()
		id := d.status().NodeID
		tr.ids[id], tr.names[n] = n, id
	}
	return tr
}

// TestControllerSurvivesKills is the binary-level acceptance, three real
// processes: A runs the controller, whose YAML declares echo-llm (from
// its package store), and uses role chat; B and C are hosts that serve it
// to A.
//
//   - A is killed with SIGKILL on its place path (--test-hold-after-place:
//     after the host answered, before A recorded it) and restarted: the
//     decision, persisted before the place was sent, is settled with the
//     host (adopted), never placed a second time.
//   - The hosting node is killed with SIGKILL: within dead_after + 2 ticks
//     the instance is rescheduled on the other host, A is served again,
//     and exactly one copy runs.
//   - The killed node restarts: its orphan is unloaded (here it died with
//     the node, which reports it unknown), and the replaced placement is
//     forgotten.
func TestControllerSurvivesKills(t *testing.T) {
	t.Parallel()
	const tick, deadAfter = trioTick, trioDeadAfter
	trio := startChatTrio(t, false, "--test-hold-after-place")
	cl, cfgs, procs, ids := trio.cl, trio.cfgs, trio.procs, trio.ids
	sock := filepath.Join(cl.dirs["a"], "nodeld.sock")
	ctlA := func(v any, args ...string) {
		t.Helper()
		out, errOut, rc := runCLI(t, append([]string{"ctl", "--socket", sock, "--json"}, args...)...)
		if rc != 0 {
			t.Fatalf("ctl %v = %d: %s", args, rc, errOut)
		}
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("ctl %v: %v\n%s", args, err, out)
		}
	}
	// copies lists the hosts running an echo-llm instance.
	copies := func() []string {
		var on []string
		for _, n := range []string{"b", "c"} {
			d := procs[n]
			select {
			case <-d.done:
				continue // killed
			default:
			}
			for _, in := range d.status().Host.Instances {
				if in.Package == "echo-llm" {
					on = append(on, n)
				}
			}
		}
		return on
	}

	// 1. A killed on its place path (the declared workload's), after the
	// host acted.
	const hook = "test hook: holding after a place answer, before the controller records it"
	waitLong(t, "A to hold on its place path", func() bool { return procs["a"].countLog(hook) > 0 })
	procs["a"].signal(syscall.SIGKILL)
	procs["a"].wait()
	on := copies()
	if len(on) != 1 {
		t.Fatalf("after the kill, echo-llm runs on %v, want one host", on)
	}
	x := on[0]
	y := map[string]string{"b": "c", "c": "b"}[x]
	procs["a"] = startDaemon(t, cl.dirs["a"], cfgs["a"])
	procs["a"].waitReady()
	var ps []operator.PlacementDoc
	waitLong(t, "the restarted controller to settle the decision", func() bool {
		ctlA(&ps, "placements")
		return len(ps) == 1 && ps[0].Life == "placed" && ids[ps[0].Node] == x && ps[0].HostState == "running" && ps[0].Declared == "chat"
	})
	first := ps[0].DecisionID
	if on := copies(); len(on) != 1 || on[0] != x {
		t.Fatalf("after the restart, echo-llm runs on %v, want only %s", on, x)
	}
	// Adopted, never placed again (decisions before it were unplaceable:
	// A had heard from no host yet). The placement shows as placed a
	// moment before its record is appended (settled persists, then
	// chains): wait for the record, then count.
	var k map[string]int
	waitLong(t, "A's chain to record the adoption", func() bool {
		k = kindCounts(t, filepath.Join(cl.dirs["a"], chainFileName))
		return k["plane.adopted"] > 0 || k["plane.placed"] > 0
	})
	if k["plane.adopted"] != 1 || k["plane.placed"] != 0 {
		t.Fatalf("A's chain after the restart: %v", k)
	}
	a := procs["a"]
	base := "http://" + a.status().Roles[0].Listen
	waitLong(t, "A to be served chat by "+x, func() bool {
		code, route, body := postChat(t, base, "before")
		return code == 200 && ids[route] == x && strings.Contains(body, "echo: before")
	})

	// 2. The hosting node killed: the instance moves.
	killed := time.Now()
	procs[x].signal(syscall.SIGKILL)
	procs[x].wait()
	waitLong(t, "the instance to move to "+y, func() bool {
		ctlA(&ps, "placements")
		for _, p := range ps {
			if p.Replaces == first && ids[p.Node] == y && p.Life == "placed" {
				return true
			}
		}
		return false
	})
	decided := chainTime(t, filepath.Join(cl.dirs["a"], chainFileName), "plane.decision", `"reason":"node_dead"`)
	if took := decided.Sub(killed); took > deadAfter+2*tick {
		t.Errorf("rescheduled %s after the kill, want within dead_after + 2 ticks (%s)", took, deadAfter+2*tick)
	} else {
		t.Logf("rescheduled %s after the kill (dead_after %s, tick %s)", took, deadAfter, tick)
	}
	waitLong(t, "A to be served chat by "+y, func() bool {
		code, route, body := postChat(t, base, "after")
		return code == 200 && ids[route] == y && strings.Contains(body, "echo: after")
	})
	if on := copies(); len(on) != 1 || on[0] != y {
		t.Fatalf("after the move, echo-llm runs on %v, want only %s", on, y)
	}

	// 3. The killed node returns: its orphan is unloaded.
	procs[x] = startDaemon(t, cl.dirs[x], cfgs[x])
	procs[x].waitReady()
	waitLong(t, "the orphan on "+x+" to be unloaded", func() bool {
		ctlA(&ps, "placements")
		return len(ps) == 1 && ids[ps[0].Node] == y && ps[0].Life == "placed"
	})
	if k := kindCounts(t, filepath.Join(cl.dirs["a"], chainFileName)); k["plane.orphan"] != 1 || k["plane.migrate"] != 1 {
		t.Fatalf("A's chain: %v", k)
	}
	if on := copies(); len(on) != 1 || on[0] != y {
		t.Fatalf("with %s back, echo-llm runs on %v, want only %s", x, on, y)
	}
	for n, d := range procs {
		d.signal(syscall.SIGTERM)
		if code := d.wait(); code != 0 {
			t.Errorf("node %s exit = %d", n, code)
		}
	}
}

// chainTime returns the time of the first entry of kind whose line
// contains match.
func chainTime(t *testing.T, path, kind, match string) time.Time {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		var e struct {
			Kind string
			Time time.Time
		}
		if line == "" || !strings.Contains(line, match) || json.Unmarshal([]byte(line), &e) != nil || e.Kind != kind {
			continue
		}
		return e.Time
	}
	t.Fatalf("no %s entry with %s in %s:\n%s", kind, match, path, planeEntries(t, path))
	return time.Time{}
}

// TestConfigCheckNotesAnIdleController: a controller with no policy is
// valid, but config check says that it will place nothing (default
// deny); with a policy, a peer and anchors it says nothing more.
func TestConfigCheckNotesAnIdleController(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(nodeConfig(filepath.Join(dir, "data"), body)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	idle := write("idle.yaml", "controller:\n  enabled: true\n")
	out, errOut, rc := runCLI(t, "config", "check", idle)
	if rc != 0 {
		t.Fatalf("config check of an idle controller = %d %q", rc, errOut)
	}
	for _, want := range []string{"idle.yaml: ok", "note: controller.enabled with no controller.policy.kinds: nothing will be placed",
		"no node to place on", "no package verifies"} {
		if !strings.Contains(out, want) {
			t.Errorf("config check output lacks %q:\n%s", want, out)
		}
	}
	busy := write("busy.yaml", fmt.Sprintf("host:\n  enabled: true\n  trust_anchors: [%s]\ncontroller:\n  enabled: true\n  policy:\n    kinds: {inference: {}}\n", strings.Repeat("ab", 32)))
	out, errOut, rc = runCLI(t, "config", "check", busy)
	if rc != 0 || strings.Contains(out, "note:") {
		t.Fatalf("config check of a controller with a policy = %d %q %q", rc, out, errOut)
	}
}

// TestControllerDeclaredWorkload: A's YAML declares echo-llm, from A's
// package store (nodeld package add); a reload that adds the declaration
// places it (on B, the only paired host), and C uses it. ctl place takes
// the package id from the store; ctl stop and unload of the controller's
// instance go through the controller (an unloaded replica of a declared
// workload is placed anew); a reload that drops the declaration takes it
// down.
func TestControllerDeclaredWorkload(t *testing.T) {
	t.Parallel()
	pkgDir, anchor := meshEchoPackage(t)
	cl := newCtlCluster(t, "a", "b", "c")
	b := startNodeAt(t, cl.dirs["b"], cl.config("b", map[string]string{"a": "paired", "c": "paired"},
		"inference:\n  probe_interval: 300ms\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n      expose: true\n      serve_to: [c]\n"+
			hostSection(cl.keys["a"], anchor), false), nil)
	c := startNodeAt(t, cl.dirs["c"], cl.config("c", map[string]string{"a": "paired", "b": "paired"},
		"inference:\n  probe_interval: 300ms\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n      use_from: [b]\n", false), nil)
	cfgA := func(workloads string) string {
		return cl.config("a", map[string]string{"b": "paired", "c": "discovered"},
			"inference:\n  roles:\n    - name: other\n      listen: 127.0.0.1:0\n"+controllerSection(anchor, "200ms", "5s", "3s")+workloads, false)
	}
	a := startNodeAt(t, cl.dirs["a"], cfgA(""), nil)
	sock := a.n.config().SocketPath()
	idB := b.n.id.ID()
	var nodes []operator.NodeDoc
	waitLong(t, "A's controller to hear from B", func() bool {
		ctlJSON(t, sock, &nodes, "nodes")
		for _, n := range nodes {
			if n.ID == idB && n.Liveness == "alive" {
				return true
			}
		}
		return false
	})

	// No package in the store yet: by id, refused; then stored.
	if _, errOut, rc := runCtl(t, "--socket", sock, "place", "--dry-run", "echo-llm"); rc != 1 || !strings.Contains(errOut, "bad_package") {
		t.Fatalf("place by id before the store has it = %d %q", rc, errOut)
	}
	if out, errOut, rc := runCLI(t, "package", "add", "--config", a.cfgPath, pkgDir); rc != 0 || !strings.Contains(out, "stored echo-llm 0.1.0") {
		t.Fatalf("package add = %d %q %q", rc, out, errOut)
	}
	if out, errOut, rc := runCtl(t, "--socket", sock, "place", "--dry-run", "echo-llm@0.1.0"); rc != 0 || !strings.Contains(out, "would place on "+idB) {
		t.Fatalf("place --dry-run by id = %d\n%s\n%s", rc, out, errOut)
	}

	// Declared: placed by the reconciliation, used by C.
	a.rewrite(cfgA("  workloads:\n    - name: chat\n      package: echo-llm\n"))
	a.n.reloader.Reload()
	if a.reloadGauge() != 1 {
		t.Fatalf("reload refused: %s", a.n.status().(*operator.StatusDoc).Config.LastReloadError)
	}
	declared := func() []operator.PlacementDoc {
		var ps, out []operator.PlacementDoc
		ctlJSON(t, sock, &ps, "placements")
		for _, p := range ps {
			if p.Declared == "chat" {
				out = append(out, p)
			}
		}
		return out
	}
	var first operator.PlacementDoc
	waitLong(t, "the declared workload to run on B", func() bool {
		ps := declared()
		if len(ps) == 1 && ps[0].Node == idB && ps[0].Life == "placed" && ps[0].HostState == "running" {
			first = ps[0]
			return true
		}
		return false
	})
	st := func() *operator.StatusDoc { return c.n.status().(*operator.StatusDoc) }
	waitLong(t, "C to resolve chat to B", func() bool { return st().Roles[0].Resolved == "remote "+idB })
	if code, route, body := postChat(t, "http://"+st().Roles[0].Listen, "declared"); code != 200 || route != idB || !strings.Contains(body, "echo: declared") {
		t.Fatalf("C's role port: %d %s %s", code, route, body)
	}

	// stop and unload of the controller's instance go through it. A
	// placement the controller is still placing (a tick that found it
	// lost on a starved link, say) answers busy: the operator retries.
	teardown := func(verb, want string) {
		t.Helper()
		var out, errOut string
		var rc int
		waitLong(t, verb+" of the controller's instance", func() bool {
			out, errOut, rc = runCtl(t, "--socket", sock, verb, "b", first.InstanceID)
			return !strings.Contains(errOut, "busy:")
		})
		if rc != 0 || !strings.Contains(out, want+first.InstanceID) {
			t.Fatalf("%s = %d %q %q", verb, rc, out, errOut)
		}
	}
	teardown("stop", "stopped ")
	if ps := declared(); len(ps) != 1 || !ps[0].Stopped || ps[0].HostState != "stopped" {
		t.Fatalf("after the stop: %+v", ps)
	}
	teardown("unload", "unloaded ")
	if n := kindCounts(t, a.chain.Path())["plane.instance"]; n != 2 {
		t.Fatalf("%d plane.instance entries, want the stop and the unload", n)
	}
	waitLong(t, "the replica to be placed anew", func() bool {
		ps := declared()
		return len(ps) == 1 && ps[0].DecisionID != first.DecisionID && ps[0].Life == "placed" && ps[0].HostState == "running"
	})

	// The declaration dropped: its replica is retired and unloaded.
	a.rewrite(cfgA(""))
	a.n.reloader.Reload()
	if a.reloadGauge() != 1 {
		t.Fatalf("reload refused: %s", a.n.status().(*operator.StatusDoc).Config.LastReloadError)
	}
	waitLong(t, "the undeclared workload to be taken down", func() bool {
		return len(declared()) == 0 && len(b.n.host.Status().Instances) == 0
	})
}
