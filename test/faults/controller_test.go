//go:build faults

package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// What the suite observes of the controller's workload. Copies are
// counted from what runs, never from the controller's own view: a copy
// is a process of the package's binary, found in /proc by the path of
// its executable under a host's data dir (<data_dir>/packages/<id>-...),
// so it is seen on a node whose nodeld is frozen or cut off too; and
// each host's own listing (/v1/status, host.instances) where it answers.
// The controller's placements (nodeld ctl placements on e) are read only
// to know when it has settled, and to name its decisions.

// procCopies returns, per host, how many processes of package pkgID run
// from its data dir.
func (c *cluster) procCopies(pkgID string) map[string]int {
	out := map[string]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	prefixes := map[string]string{}
	for _, h := range hosts {
		prefixes[h] = filepath.Join(c.n(h).dir, "packages", pkgID+"-")
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue // gone, or a zombie
		}
		for h, p := range prefixes {
			if strings.HasPrefix(exe, p) {
				out[h]++
			}
		}
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// hostInstance is one instance of a host's own listing.
type hostInstance struct {
	ID         string `json:"id"`
	DecisionID string `json:"decision_id"`
	Package    string `json:"package"`
	State      string `json:"state"`
}

// listed returns the instances of pkgID n's host lists (its /v1/status).
func (n *node) listed(pkgID string) ([]hostInstance, error) {
	code, body, err := n.get("/v1/status")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("status: %d", code)
	}
	var st struct {
		Host *struct {
			Instances []hostInstance `json:"instances"`
		} `json:"host"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return nil, err
	}
	var out []hostInstance
	if st.Host != nil {
		for _, in := range st.Host.Instances {
			if in.Package == pkgID {
				out = append(out, in)
			}
		}
	}
	return out, nil
}

// placement is the part of a controller placement the suite reads.
type placement struct {
	DecisionID string `json:"decision_id"`
	Package    string `json:"package"`
	Node       string `json:"node"`
	InstanceID string `json:"instance_id"`
	Life       string `json:"life"`
	HostState  string `json:"host_state"`
	Declared   string `json:"declared"`
	Replaces   string `json:"replaces"`
}

// ctlE runs `nodeld ctl VERB ARGS` through e, the controller's node; in
// the raft cluster through the controller that leads now (the others
// answer reads from their replica, which does not know the hosts'
// liveness), e when none does.
func (c *cluster) ctlE(args ...string) (string, string, error) {
	via := c.n(nodeE)
	if c.raft {
		if l := c.leader(); l != nil {
			via = l
		}
	}
	return nodeldCLI(append([]string{"ctl", "--config", via.cfgPath}, args...)...)
}

func (c *cluster) placements() ([]placement, error) {
	out, errOut, err := c.ctlE("--json", "placements")
	if err != nil {
		return nil, fmt.Errorf("ctl placements: %v %s", err, firstLine(errOut))
	}
	var ps []placement
	return ps, json.Unmarshal([]byte(out), &ps)
}

// hostsAlive reports whether e's controller holds both hosts alive, with
// their facts.
func (c *cluster) hostsAlive() bool {
	out, _, err := c.ctlE("--json", "nodes")
	if err != nil {
		return false
	}
	var ns []struct {
		ID       string `json:"id"`
		Liveness string `json:"liveness"`
		HasFacts bool   `json:"has_facts"`
	}
	if json.Unmarshal([]byte(out), &ns) != nil {
		return false
	}
	alive := 0
	for _, n := range ns {
		if h := c.byID(n.ID); h != nil && slices.Contains(hosts, h.name) && n.Liveness == "alive" && n.HasFacts {
			alive++
		}
	}
	return alive == len(hosts)
}

// settled returns the host of the controller's workload when the
// cluster is settled: the controller holds exactly one placement, gen's,
// placed and running, and holds both hosts alive; exactly one process of
// echo-llm runs, on that host, which lists it running and the other host
// none; and c holds the host's fresh gen advert. Else nil and why not.
func (c *cluster) settled() (*node, string) {
	ps, err := c.placements()
	if err != nil {
		return nil, err.Error()
	}
	if len(ps) != 1 || ps[0].Declared != "gen" || ps[0].Life != "placed" || ps[0].HostState != "running" {
		return nil, fmt.Sprintf("the controller's placements: %+v", ps)
	}
	h := c.byID(ps[0].Node)
	if h == nil || !slices.Contains(hosts, h.name) {
		return nil, "placed on " + ps[0].Node
	}
	if procs := c.procCopies(genPkg); total(procs) != 1 || procs[h.name] != 1 {
		return nil, fmt.Sprintf("echo-llm processes %v", procs)
	}
	for _, name := range hosts {
		ins, err := c.n(name).listed(genPkg)
		if err != nil {
			return nil, err.Error()
		}
		want := 0
		if name == h.name {
			want = 1
		}
		if len(ins) != want || (want == 1 && ins[0].State != "running") {
			return nil, fmt.Sprintf("%s lists %+v", name, ins)
		}
	}
	if !slices.Contains(c.freshFor("gen"), h.id) {
		return nil, "c holds no fresh gen advert of " + h.name
	}
	if !c.hostsAlive() {
		return nil, "the controller does not hold both hosts alive"
	}
	return h, ""
}

// waitSettled waits until the cluster is settled (settled) and returns
// the workload's host.
func (c *cluster) waitSettled() (*node, error) {
	var h *node
	var why string
	err := until("the controller's workload to be settled", waitLimit, func() bool {
		h, why = c.settled()
		return h != nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, why)
	}
	return h, nil
}

func (c *cluster) otherHost(h *node) *node {
	if h.name == nodeA {
		return c.n(nodeB)
	}
	return c.n(nodeA)
}

// askGen sends one short completion to c's gen port and returns the
// serving node's id when it was answered right.
func (c *cluster) askGen() (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	body := `{"messages":[{"role":"user","content":"gen ping"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+genPort+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return "", false
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := c.n(nodeC).http.Do(req)
	if err != nil {
		return "", false
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.Header.Get("X-Nodeld-Route"), err == nil && res.StatusCode == http.StatusOK && strings.Contains(string(b), "echo: gen ping")
}

// copyWatch samples the processes of a package on every host every
// 50 ms, from start to stop.
type copyWatch struct {
	mu    sync.Mutex
	snaps []copySnap
	stopc chan struct{}
	done  chan struct{}
	c     *cluster
	pkgID string
	final *copySnap // the sample taken by the first stop
}

type copySnap struct {
	at  time.Time
	per map[string]int
}

func (c *cluster) watchCopies(pkgID string) *copyWatch {
	w := &copyWatch{stopc: make(chan struct{}), done: make(chan struct{}), c: c, pkgID: pkgID}
	go func() {
		defer close(w.done)
		for {
			s := copySnap{at: time.Now(), per: c.procCopies(pkgID)}
			w.mu.Lock()
			w.snaps = append(w.snaps, s)
			w.mu.Unlock()
			select {
			case <-w.stopc:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return w
}

// sample records one sample now and returns it: what a caller saw is in
// the record before it acts on it.
func (w *copyWatch) sample() map[string]int {
	s := copySnap{at: time.Now(), per: w.c.procCopies(w.pkgID)}
	w.mu.Lock()
	w.snaps = append(w.snaps, s)
	w.mu.Unlock()
	return s.per
}

func (w *copyWatch) stop() []copySnap {
	select {
	case <-w.stopc:
	default:
		close(w.stopc)
	}
	<-w.done
	// One more sample: what a caller saw just before stop is in it.
	s := copySnap{at: time.Now(), per: w.c.procCopies(w.pkgID)}
	w.mu.Lock()
	if w.final == nil {
		w.final = &s
		w.snaps = append(w.snaps, s)
	}
	defer w.mu.Unlock()
	out := slices.Clone(w.snaps)
	// sample's and the watcher's samples in the order they were taken.
	slices.SortStableFunc(out, func(a, b copySnap) int { return a.at.Compare(b.at) })
	return out
}

// most is the largest number of copies seen at once.
func most(snaps []copySnap) int {
	m := 0
	for _, s := range snaps {
		m = max(m, total(s.per))
	}
	return m
}

// last returns the sample last taken before t (zero if none).
func last(snaps []copySnap, t time.Time) copySnap {
	var out copySnap
	for _, s := range snaps {
		if s.at.Before(t) {
			out = s
		}
	}
	return out
}

// first returns the time of the first sample after t where cond holds,
// zero if none.
func first(snaps []copySnap, t time.Time, cond func(map[string]int) bool) time.Time {
	for _, s := range snaps {
		if s.at.After(t) && cond(s.per) {
			return s.at
		}
	}
	return time.Time{}
}

// chainLine is the part of a chain entry the suite reads for timing.
type chainLine struct {
	Kind string    `json:"kind"`
	Time time.Time `json:"time"`
}

// chainTimes returns the times of the entries of kind in the node's
// chain whose line contains match, in order.
func (n *node) chainTimes(kind, match string) []time.Time {
	f, err := os.Open(filepath.Join(n.dir, "chain.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e chainLine
		if !strings.Contains(sc.Text(), match) || json.Unmarshal(sc.Bytes(), &e) != nil || e.Kind != kind {
			continue
		}
		out = append(out, e.Time)
	}
	return out
}

// decidedAfter returns the time of the controllers' first decision
// after t whose entry contains match ("node_dead"), zero if none.
func (c *cluster) decidedAfter(t time.Time, match string) time.Time {
	var first time.Time
	for _, name := range c.ctrls {
		for _, at := range c.n(name).chainTimes("plane.decision", match) {
			if at.After(t) && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
	}
	return first
}

// rescheduleLimit is how soon after a host dies (or freezes, or is cut
// off) the controller decides to move its workload, and how soon after
// it returns its orphan goes: dead_after + 2 ticks.
const rescheduleLimit = ctlDead + 2*ctlTick

func sinceOr(t, from time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return ms(t.Sub(from))
}

// killHost is fault 2: the node running the controller's workload gets
// SIGKILL (its instance dies with it). The controller finds it dead
// after dead_after without an answer and places the workload on the
// other host; c's gen port is served from there. The killed node is
// restarted and must not bring a second copy back.
func killHost(c *cluster) outcome {
	h, err := c.waitSettled()
	if err != nil {
		return miss("%v", err)
	}
	other := c.otherHost(h)
	defer func() { // whatever happens below, h ends running
		if !h.running() {
			_ = h.start()
		}
	}()
	w := c.watchCopies(genPkg)
	defer w.stop()
	killed := time.Now()
	h.process().signal(syscall.SIGKILL)
	<-h.process().done
	var served time.Time
	err = until("c to be served gen by "+other.name, waitLimit, func() bool {
		if route, ok := c.askGen(); ok && route == other.id {
			served = time.Now()
			return true
		}
		return false
	})
	if err != nil {
		snaps := w.stop()
		return miss("%v (echo-llm processes at the end: %v; the controller decided at %s)", err, snaps[len(snaps)-1].per, sinceOr(c.decidedAfter(killed, "node_dead"), killed))
	}
	restarted := time.Now()
	if err := h.start(); err != nil {
		return miss("restart %s: %v", h.name, err)
	}
	if err := h.waitReady(); err != nil {
		return miss("%v", err)
	}
	back, err := c.waitSettled()
	if err != nil {
		return miss("after %s returned: %v", h.name, err)
	}
	settledAfter := time.Since(restarted)
	snaps := w.stop()
	decided := c.decidedAfter(killed, "node_dead")
	running := first(snaps, killed, func(p map[string]int) bool { return p[other.name] > 0 })
	gone := first(snaps, killed.Add(-time.Millisecond), func(p map[string]int) bool { return p[h.name] == 0 })
	n := most(snaps)
	o := outcome{
		observed: fmt.Sprintf("echo-llm ran on %s; killed it: its copy gone %s after the kill; the controller decided the move %s after it (node_dead); a copy ran on %s %s after it; c served gen from %s %s after it; at most %d copy at once; %s restarted, settled %s later with the one copy on %s",
			h.name, sinceOr(gone, killed), sinceOr(decided, killed), other.name, sinceOr(running, killed), other.name, ms(served.Sub(killed)), n, h.name, ms(settledAfter), back.name),
		figure: fmt.Sprintf("served again %s after the kill (decided %s; limit dead_after + 2 ticks = %s); max copies %d", ms(served.Sub(killed)), sinceOr(decided, killed), ms(rescheduleLimit), n),
		pass:   !decided.IsZero() && decided.Sub(killed) <= rescheduleLimit && n <= 1 && back == other,
	}
	return o
}

// frozenExtra is how long fault 3 keeps the node frozen after the
// replacement runs.
const frozenExtra = time.Second

// freezeHost is fault 3: the node running the workload gets SIGSTOP
// (its instance runs on: nodeld is frozen, not its children) for
// longer than dead_after: the controller finds it dead and places the
// workload on the other host, so two copies run. Then SIGCONT: the node
// answers again and the controller unloads its copy, the orphan.
func freezeHost(c *cluster) outcome {
	h, err := c.waitSettled()
	if err != nil {
		return miss("%v", err)
	}
	other := c.otherHost(h)
	frozen := false
	defer func() { // whatever happens below, h ends running
		if frozen {
			h.process().signal(syscall.SIGCONT)
		}
	}()
	w := c.watchCopies(genPkg)
	defer w.stop()
	stopped := time.Now()
	h.process().signal(syscall.SIGSTOP)
	frozen = true
	err = until("a copy on "+other.name+" while "+h.name+" is frozen", waitLimit, func() bool {
		return c.procCopies(genPkg)[other.name] > 0
	})
	if err != nil {
		return miss("%v", err)
	}
	// Frozen past dead_after by then (the move needs h dead); it stays
	// frozen a while longer, with two copies running.
	time.Sleep(frozenExtra) // the length of the fault, not a wait for a condition
	h.process().signal(syscall.SIGCONT)
	frozen = false
	returned := time.Now()
	back, err := c.waitSettled()
	if err != nil {
		return miss("after %s returned: %v", h.name, err)
	}
	snaps := w.stop()
	decided := c.decidedAfter(stopped, "node_dead")
	two := first(snaps, stopped, func(p map[string]int) bool { return p[h.name] > 0 && p[other.name] > 0 })
	orphanGone := first(snaps, returned, func(p map[string]int) bool { return p[h.name] == 0 })
	after := orphanGone.Sub(returned)
	o := outcome{
		observed: fmt.Sprintf("echo-llm ran on %s; SIGSTOP: the controller decided the move %s later (node_dead); two copies from %s after the stop; SIGCONT after %s; the orphan on %s gone %s after it returned; settled with one copy on %s",
			h.name, sinceOr(decided, stopped), sinceOr(two, stopped), ms(returned.Sub(stopped)), h.name, sinceOr(orphanGone, returned), back.name),
		figure: fmt.Sprintf("two copies for %s, of which %s after it returned (expected <= dead_after + 2 ticks = %s)", ms(orphanGone.Sub(two)), ms(after), ms(rescheduleLimit)),
		pass:   !two.IsZero() && !orphanGone.IsZero() && after <= rescheduleLimit && back == other,
	}
	return o
}

// partitionHost is fault 4: the switch port of the node running the
// workload goes down (every frame from and to it dropped) until the
// controller has placed the workload on the other host: two copies run
// while it lasts. Then the port comes up: the controller unloads the
// orphan and one copy runs.
func partitionHost(c *cluster) outcome {
	h, err := c.waitSettled()
	if err != nil {
		return miss("%v", err)
	}
	other := c.otherHost(h)
	cut := false
	defer func() { // whatever happens below, the partition heals
		if cut {
			c.nw.sw.impair(h.name, impairment{})
		}
	}()
	w := c.watchCopies(genPkg)
	defer w.stop()
	start := time.Now()
	c.nw.sw.impair(h.name, impairment{Down: true})
	cut = true
	var served time.Time
	err = until("a copy on "+other.name+" serving c during the partition", waitLimit, func() bool {
		if route, ok := c.askGen(); ok && route == other.id {
			served = time.Now()
			return true
		}
		return false
	})
	if err != nil {
		return miss("%v", err)
	}
	// The copy that served c is in the record before the port comes up
	// (the watcher's next sample could come after it).
	err = until("the copy on "+other.name+" in the copies' record", waitLimit, func() bool { return w.sample()[other.name] > 0 })
	if err != nil {
		return miss("%v", err)
	}
	c.nw.sw.impair(h.name, impairment{})
	cut = false
	healed := time.Now()
	back, err := c.waitSettled()
	if err != nil {
		return miss("after the partition healed: %v", err)
	}
	snaps := w.stop()
	decided := c.decidedAfter(start, "node_dead")
	running := first(snaps, start, func(p map[string]int) bool { return p[other.name] > 0 })
	atHeal := last(snaps, healed).per
	orphanGone := first(snaps, healed, func(p map[string]int) bool { return p[h.name] == 0 })
	o := outcome{
		observed: fmt.Sprintf("echo-llm ran on %s; its port down: the controller decided the move %s later (node_dead), a copy ran on %s %s later and served c %s later; healed after %s with copies %v; the orphan on %s gone %s after it healed; settled with one copy on %s",
			h.name, sinceOr(decided, start), other.name, sinceOr(running, start), ms(served.Sub(start)), ms(healed.Sub(start)), atHeal, h.name, sinceOr(orphanGone, healed), back.name),
		figure: fmt.Sprintf("rescheduled %s into the partition (decided %s); orphan unloaded %s after it healed", sinceOr(running, start), sinceOr(decided, start), sinceOr(orphanGone, healed)),
		pass:   !decided.IsZero() && !running.IsZero() && running.Before(healed) && atHeal[h.name] == 1 && !orphanGone.IsZero() && back == other,
	}
	return o
}

// A point of the controller's place path where fault 6 kills it.
type placePoint struct {
	name string
	flag string // the test-only nodeld run flag that holds it there; "" for none
	hook string // what it logs when it holds
	// inFlight kills it while a host lists the decision in flight (the
	// host fetching the package from the controller, slowed by a delay
	// on the hosts' links).
	inFlight bool
}

var placePoints = []placePoint{
	{name: "before the place is sent (candidate persisted)", flag: "--test-hold-before-place", hook: "test hook: holding before a place is sent"},
	{name: "while the host places it (fetching the package from the controller)", inFlight: true},
	{name: "after the host answered, before the controller recorded it", flag: "--test-hold-after-place", hook: "test hook: holding after a place answer"},
	{name: "right after the place was recorded (ctl place returned)"},
}

// inFlightDelay slows what the hosts send while fault 6 waits for a
// place in flight: the package's fetch then takes many round trips.
const inFlightDelay = 100 * time.Millisecond

// inFlight reports whether a host lists a place of pkgID in flight.
func (c *cluster) inFlight(pkgID string) string {
	for _, name := range hosts {
		code, body, err := c.n(name).get("/v1/status")
		if err != nil || code != http.StatusOK {
			continue
		}
		var st struct {
			Host *struct {
				InFlight []struct {
					Package string `json:"package"`
				} `json:"in_flight"`
			} `json:"host"`
		}
		if json.Unmarshal([]byte(body), &st) != nil || st.Host == nil {
			continue
		}
		for _, f := range st.Host.InFlight {
			if f.Package == pkgID {
				return name
			}
		}
	}
	return ""
}

// lastHash returns the hash of the node's last chain entry of kind
// (a plane.decision's hash is its decision id), "" if none.
func (n *node) lastHash(kind string) string {
	b, err := os.ReadFile(filepath.Join(n.dir, "chain.log"))
	if err != nil {
		return ""
	}
	h := ""
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			Kind string `json:"kind"`
			Hash string `json:"hash"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Kind == kind {
			h = e.Hash
		}
	}
	return h
}

// countLog counts the lines of the node's log that contain s.
func (n *node) countLog(s string) int {
	b, err := os.ReadFile(n.logPath())
	if err != nil {
		return 0
	}
	return strings.Count(string(b), s)
}

// killControllerMidPlace is fault 6: e's controller is killed with
// SIGKILL at each point of its place path in turn while it places
// batch-a (role batch: no role port serves it) through `nodeld ctl
// place` (the engine chooses a or b), and is restarted. Never two
// copies; the restarted controller reconciles the decision with the
// host: it ends placed with the one copy the host runs (or given up,
// with none); then batch-a is unloaded through it.
func killControllerMidPlace(c *cluster) outcome {
	e := c.n(nodeE)
	pkgDir := c.pkgs["batch-a"]
	var notes []string
	pass := true
	w := c.watchCopies("batch-a")
	defer w.stop()
	defer func() { // after a miss, e ends running without a hook, and batch-a unloaded
		if pass && e.running() {
			return
		}
		if e.running() {
			_ = e.stop()
		}
		if e.start() == nil && e.waitReady() == nil {
			_ = c.unloadAll("batch-a")
		}
	}()
	for _, pt := range placePoints {
		note, ok := c.killAt(e, pkgDir, pt)
		notes = append(notes, note)
		if !ok {
			pass = false
			break
		}
	}
	n := most(w.stop())
	return outcome{
		observed: strings.Join(notes, "; ") + fmt.Sprintf("; at most %d copy of batch-a at once", n),
		figure:   fmt.Sprintf("%d/%d kill points reconciled; max copies %d", len(notes)-boolInt(!pass), len(placePoints), n),
		pass:     pass && n <= 1,
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// killAt runs one kill of fault 6 and says what it saw.
func (c *cluster) killAt(e *node, pkgDir string, pt placePoint) (string, bool) {
	fail := func(format string, args ...any) (string, bool) {
		return pt.name + ": " + fmt.Sprintf(format, args...), false
	}
	var extra []string
	if pt.flag != "" {
		extra = []string{pt.flag}
	}
	if err := e.restart(extra...); err != nil {
		return fail("restart e: %v", err)
	}
	if err := until("e to hold both hosts alive", waitLimit, c.hostsAlive); err != nil {
		return fail("%v", err)
	}
	hooked := 0
	if pt.hook != "" {
		hooked = e.countLog(pt.hook)
	}
	type result struct {
		out, errOut string
		err         error
	}
	res := make(chan result, 1)
	go func() {
		out, errOut, err := c.ctlE("place", pkgDir)
		res <- result{out, errOut, err}
	}()
	var r result
	held := "" // in flight on this host when killed
	switch {
	case pt.inFlight:
		for _, name := range hosts {
			c.nw.sw.impair(name, impairment{Delay: inFlightDelay})
		}
		err := until("a host to hold the place in flight", waitLimit, func() bool {
			held = c.inFlight("batch-a")
			return held != "" || len(res) > 0 // or the place is over
		})
		if err == nil && held == "" {
			err = errors.New("the place ended before a host was seen holding it in flight")
		}
		e.process().signal(syscall.SIGKILL)
		<-e.process().done
		for _, name := range hosts {
			c.nw.sw.impair(name, impairment{})
		}
		r = <-res
		if err != nil {
			return fail("%v (ctl place: exit %d %s)", err, exitCode(r.err), firstLine(r.out+r.errOut))
		}
	case pt.hook != "":
		err := until("e to hold on its place path", waitLimit, func() bool { return e.countLog(pt.hook) > hooked })
		if err != nil {
			e.process().signal(syscall.SIGKILL)
			<-res
			return fail("%v", err)
		}
		e.process().signal(syscall.SIGKILL)
		<-e.process().done
		r = <-res
	default:
		r = <-res
		e.process().signal(syscall.SIGKILL)
		<-e.process().done
		if r.err != nil {
			return fail("ctl place: %v %s", r.err, firstLine(r.errOut))
		}
	}
	atKill := c.procCopies("batch-a")
	decision := e.lastHash("plane.decision") // the decision it was killed on
	if err := e.start(); err != nil {
		return fail("start e: %v", err)
	}
	if err := e.waitReady(); err != nil {
		return fail("%v", err)
	}
	// The restarted controller reconciles the decision: it ends placed,
	// with its one copy on its node, or given up with none.
	var p placement
	var why string
	err := until("the restarted controller to reconcile the decision", waitLimit, func() bool {
		ps, err := c.placements()
		if err != nil {
			why = err.Error()
			return false
		}
		var mine []placement
		for _, q := range ps {
			if q.Package == "batch-a" {
				mine = append(mine, q)
			}
		}
		procs := c.procCopies("batch-a")
		switch {
		case len(mine) == 0:
			why = fmt.Sprintf("no placement of batch-a; processes %v", procs)
			p = placement{}
			return total(procs) == 0
		case len(mine) > 1:
			why = fmt.Sprintf("placements %+v", mine)
			return false
		}
		p = mine[0]
		why = fmt.Sprintf("placement %+v; processes %v", p, procs)
		h := c.byID(p.Node)
		return p.Life == "placed" && p.HostState == "running" && h != nil && total(procs) == 1 && procs[h.name] == 1
	})
	if err != nil {
		return fail("%v: %s", err, why)
	}
	note := fmt.Sprintf("%s: ctl place exit %d; batch-a processes when killed %v; ", pt.name, exitCode(r.err), atKill)
	if held != "" {
		note = fmt.Sprintf("%s: ctl place exit %d; killed with the place in flight on %s; batch-a processes when killed %v; ", pt.name, exitCode(r.err), held, atKill)
	}
	if p.DecisionID == "" {
		note += fmt.Sprintf("the restarted controller gave decision %.8s up, no copy", decision)
		return note, true
	}
	if p.DecisionID != decision {
		return fail("placed under decision %.8s, not %.8s, the one it was killed on", p.DecisionID, decision)
	}
	h := c.byID(p.Node)
	ins, err := h.listed("batch-a")
	if err != nil || len(ins) != 1 || ins[0].DecisionID != p.DecisionID {
		return fail("%s lists %+v (%v) for decision %s", h.name, ins, err, p.DecisionID)
	}
	// How the controller settled it, from its chain (the entry may follow
	// the placement's state by a moment).
	how := ""
	_ = until("e to chain how it settled the decision", 2*time.Second, func() bool {
		for _, k := range []string{"plane.adopted", "plane.placed"} {
			if len(e.chainTimes(k, p.DecisionID)) > 0 {
				how = strings.TrimPrefix(k, "plane.")
				return true
			}
		}
		return false
	})
	if how == "" {
		how = "settled (neither plane.placed nor plane.adopted chained)"
	}
	note += fmt.Sprintf("reconciled: %s on %s under the same decision %.8s, the host's one copy", how, h.name, p.DecisionID)
	// Unloaded through the controller, so the next point starts clean.
	if err := c.unloadAll("batch-a"); err != nil {
		return fail("%v", err)
	}
	return note, true
}

// unloadAll unloads every placement of pkgID through the controller and
// waits until none is left and no copy runs. A placement the controller
// is still working on answers busy: the unload is tried again.
func (c *cluster) unloadAll(pkgID string) error {
	var why string
	err := until(pkgID+" unloaded", waitLimit, func() bool {
		ps, err := c.placements()
		if err != nil {
			why = err.Error()
			return false
		}
		left := 0
		for _, q := range ps {
			if q.Package != pkgID {
				continue
			}
			left++
			if _, errOut, err := c.ctlE("unload", q.Node, q.InstanceID); err != nil {
				why = fmt.Sprintf("unload %s: %v %s", q.InstanceID, err, firstLine(errOut))
			}
		}
		procs := c.procCopies(pkgID)
		if left > 0 || total(procs) > 0 {
			why = fmt.Sprintf("%d placements left, processes %v; %s", left, procs, why)
			return false
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, why)
	}
	return nil
}
