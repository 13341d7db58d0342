//go:build faults

package faults

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The faults of the controllers in raft (rows 9 to 11) run on the raft
// cluster: e, f and g are controller.voters of each other, a and b list
// all three in host.controllers, and only the leader ticks and places.

// electionLimit is the promise of a new leader after the old one is gone
// (raft's LAN timeouts, internal/raftmesh/config.go).
const electionLimit = 3 * time.Second

// raftView is a controller's raft role as its /v1/status says it.
type raftView struct {
	Role       string `json:"role"`
	Term       uint64 `json:"term"`
	Leader     string `json:"leader"`
	LeaderName string `json:"leader_name"`
}

// raft returns the node's raft role from its /v1/status.
func (n *node) raft() (raftView, error) {
	code, body, err := n.get("/v1/status")
	if err != nil {
		return raftView{}, err
	}
	if code != http.StatusOK {
		return raftView{}, fmt.Errorf("status: %d", code)
	}
	var st struct {
		Controller *struct {
			Raft *raftView `json:"raft"`
		} `json:"controller"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return raftView{}, err
	}
	if st.Controller == nil || st.Controller.Raft == nil {
		return raftView{}, fmt.Errorf("%s runs no controller in raft", n.name)
	}
	return *st.Controller.Raft, nil
}

// leaderAmong returns the running node of names whose raft role is
// leader and whom every other running one of names follows, nil if
// there is none such.
func (c *cluster) leaderAmong(names []string) *node {
	var leader *node
	agreed := ""
	for _, name := range names {
		n := c.n(name)
		if !n.running() {
			continue
		}
		v, err := n.raft()
		if err != nil || v.Leader == "" || agreed != "" && v.Leader != agreed {
			return nil
		}
		agreed = v.Leader
		if v.Role == "leader" {
			leader = n
		}
	}
	if leader == nil || leader.id != agreed {
		return nil
	}
	return leader
}

// leader is the controllers' agreed leader, nil if none.
func (c *cluster) leader() *node { return c.leaderAmong(c.ctrls) }

// others returns the nodes of names but those skipped.
func others(names []string, skip ...string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(skip, n) })
}

// settle waits for the cluster to settle with one copy (waitSettled) and
// one leader all the controllers name, and says how long after since that
// was.
func (c *cluster) settle(since time.Time) (back, leader *node, took time.Duration, err error) {
	if back, err = c.waitSettled(); err != nil {
		return nil, nil, 0, err
	}
	if leader, _, err = c.waitLeader(c.ctrls); err != nil {
		return nil, nil, 0, err
	}
	return back, leader, time.Since(since), nil
}

// waitLeader waits for an agreed leader among names and returns it with
// the time it was first seen.
func (c *cluster) waitLeader(names []string) (*node, time.Time, error) {
	var l *node
	err := until("one leader among "+strings.Join(names, ", "), waitLimit, func() bool {
		l = c.leaderAmong(names)
		return l != nil
	})
	return l, time.Now(), err
}

// metricWith sums the series of a metric whose labels contain match
// (`result="stale_term"`).
func (n *node) metricWith(name, match string) (float64, error) {
	code, body, err := n.get("/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("metrics: %d", code)
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, match) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// killLeaderAndHost is fault 9: the raft leader and the node running
// the workload get SIGKILL at once. The two controllers left elect a
// new leader, which rebuilds its state from its replica, hears nothing
// from the dead host for dead_after (its liveness of every node starts
// anew when it takes the lead) and places the workload on the other
// host; c's gen port is served from there. Both nodes are restarted: the
// old leader follows, the old host brings no copy back.
func killLeaderAndHost(c *cluster) outcome {
	h, err := c.waitSettled()
	if err != nil {
		return miss("%v", err)
	}
	old := c.leader()
	if old == nil {
		return miss("no agreed leader before the fault")
	}
	before, _ := old.raft()
	other := c.otherHost(h)
	rest := others(c.ctrls, old.name)
	defer func() { // whatever happens below, both end running
		for _, n := range []*node{old, h} {
			if !n.running() {
				_ = n.start()
			}
		}
	}()
	w := c.watchCopies(genPkg)
	defer w.stop()
	killed := time.Now()
	old.process().signal(syscall.SIGKILL)
	h.process().signal(syscall.SIGKILL)
	<-old.process().done
	<-h.process().done
	leader, elected, err := c.waitLeader(rest)
	if err != nil {
		return miss("after killing %s (leader) and %s (host): %v", old.name, h.name, err)
	}
	after, _ := leader.raft()
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
		return miss("%v (echo-llm processes at the end: %v; the new leader %s decided at %s)", err, snaps[len(snaps)-1].per, leader.name, sinceOr(c.decidedAfter(killed, "node_dead"), killed))
	}
	restarted := time.Now()
	for _, n := range []*node{old, h} {
		if err := n.start(); err != nil {
			return miss("restart %s: %v", n.name, err)
		}
	}
	for _, n := range []*node{old, h} {
		if err := n.waitReady(); err != nil {
			return miss("%v", err)
		}
	}
	back, final, settledAfter, err := c.settle(restarted)
	if err != nil {
		return miss("after %s and %s returned: %v", old.name, h.name, err)
	}
	snaps := w.stop()
	decided := c.decidedAfter(killed, "node_dead")
	running := first(snaps, killed, func(p map[string]int) bool { return p[other.name] > 0 })
	n := most(snaps)
	election := elected.Sub(killed)
	limit := rescheduleLimit + election
	o := outcome{
		observed: fmt.Sprintf("%s led in term %d, echo-llm ran on %s; killed both: %s leads in term %d %s after the kill; it decided the move %s after it (node_dead); a copy ran on %s %s after it; c served gen from %s %s after it; at most %d copy at once; %s and %s restarted, settled %s later with the one copy on %s and %s leading",
			old.name, before.Term, h.name, leader.name, after.Term, ms(election), sinceOr(decided, killed), other.name, sinceOr(running, killed), other.name, ms(served.Sub(killed)), n, old.name, h.name, ms(settledAfter), back.name, final.name),
		figure: fmt.Sprintf("new leader %s after the kill (limit %s); move decided %s after it (limit dead_after + 2 ticks + the election = %s); served again %s; max copies %d",
			ms(election), ms(electionLimit), sinceOr(decided, killed), ms(limit), ms(served.Sub(killed)), n),
		pass: election <= electionLimit && !decided.IsZero() && decided.Sub(killed) <= limit && n <= 1 && back == other && after.Term > before.Term,
	}
	return o
}

// partitionHold is how long fault 10 keeps the old leader cut off once
// the majority leads and the host heard its term: long enough for a
// controller that took the host for dead to move its workload
// (dead_after + 2 ticks), and for the old leader to act if it still
// believed it led.
const partitionHold = rescheduleLimit

// leaderCut is what faults 10 and 11 start from: the settled cluster's
// host of the workload, its raft leader and that leader's view, the
// other controllers, the nodes the leader is cut from (all but itself
// and the host), and the host's stale_term refusals so far.
type leaderCut struct {
	host, old   *node
	before      raftView
	rest        []string
	cutFrom     []string
	staleBefore float64
}

// prepareLeaderCut waits for a settled cluster with an agreed leader and
// reads what a leader's cut starts from.
func (c *cluster) prepareLeaderCut() (leaderCut, error) {
	h, err := c.waitSettled()
	if err != nil {
		return leaderCut{}, err
	}
	old := c.leader()
	if old == nil {
		return leaderCut{}, errors.New("no agreed leader before the fault")
	}
	before, _ := old.raft()
	stale, err := h.metricWith("nodeld_host_ctl_calls_total", `result="stale_term"`)
	if err != nil {
		return leaderCut{}, err
	}
	return leaderCut{host: h, old: old, before: before, rest: others(c.ctrls, old.name),
		cutFrom: others(raftNodes, old.name, h.name), staleBefore: stale}, nil
}

// partitionLeader is fault 10: the switch drops every frame between the
// leader and every node but the host running the workload, which still
// reaches everyone (so the majority's new leader holds it alive: no
// reason to move its workload, and a second copy would be a split
// brain). The majority elects a new leader whose calls raise the host's
// term; the old leader steps down once it misses a quorum for its lease
// and places nothing; a call it still sends at its old term would be
// refused stale_term (counted and chained by the host). Then the
// partition heals: one leader, the cluster settled with the one copy
// where it was.
func partitionLeader(c *cluster) outcome {
	lc, err := c.prepareLeaderCut()
	if err != nil {
		return miss("%v", err)
	}
	h, old, before, rest, cutFrom, staleBefore := lc.host, lc.old, lc.before, lc.rest, lc.cutFrom, lc.staleBefore
	cut := false
	defer func() { // whatever happens below, the partition heals
		if cut {
			c.nw.sw.impair(old.name, impairment{})
		}
	}()
	w := c.watchCopies(genPkg)
	defer w.stop()
	start := time.Now()
	c.nw.sw.impair(old.name, impairment{Cut: cutFrom})
	cut = true
	// Three events, watched together so each gets its own time: a new
	// leader among the majority, the host hearing its term, the old
	// leader stepping down.
	var (
		leader                   *node
		now                      raftView
		elected, raised, stepped time.Time
	)
	err = until("a new leader of "+strings.Join(rest, ", ")+", "+h.name+" hearing its term, "+old.name+" stepping down", waitLimit, func() bool {
		t := time.Now()
		if leader == nil {
			if l := c.leaderAmong(rest); l != nil {
				if v, err := l.raft(); err == nil && v.Term > before.Term {
					leader, now, elected = l, v, t
				}
			}
		}
		if stepped.IsZero() {
			if v, err := old.raft(); err == nil && v.Role != "leader" {
				stepped = t
			}
		}
		if leader != nil && raised.IsZero() {
			if term, err := h.metricWith("nodeld_host_controller_term", ""); err == nil && term >= float64(now.Term) {
				raised = t
			}
		}
		return leader != nil && !raised.IsZero() && !stepped.IsZero()
	})
	if err != nil {
		return miss("%s cut off from %s: %v (leader %v, host's term raised %v, old leader stepped down %v)", old.name, strings.Join(cutFrom, ", "), err, leader != nil, !raised.IsZero(), !stepped.IsZero())
	}
	time.Sleep(partitionHold) // the length of the fault, not a wait for a condition
	staleAfter, err := h.metricWith("nodeld_host_ctl_calls_total", `result="stale_term"`)
	if err != nil {
		return miss("%v", err)
	}
	stillOn := c.procCopies(genPkg)
	// What the old leader decided while cut off (it must decide nothing:
	// it led for at most its lease, without a quorum to commit).
	decidedByOld := 0
	for _, at := range old.chainTimes("plane.decision", "") {
		if at.After(start) {
			decidedByOld++
		}
	}
	c.nw.sw.impair(old.name, impairment{})
	cut = false
	back, final, settledAfter, err := c.settle(time.Now())
	if err != nil {
		return miss("after the partition healed: %v", err)
	}
	fv, _ := final.raft()
	snaps := w.stop()
	n := most(snaps)
	moved := first(snaps, start, func(p map[string]int) bool { return p[h.name] == 0 })
	refusedChained := 0
	if es, err := chainEntries(h.dir + "/chain.log"); err == nil {
		for _, e := range es {
			if e.Kind == "host.ctl.refused" && e.Payload["code"] == "stale_term" && e.Payload["peer"] == old.id {
				refusedChained++
			}
		}
	}
	election := elected.Sub(start)
	order := "before"
	if raised.Before(stepped) {
		order = "after"
	}
	o := outcome{
		observed: fmt.Sprintf("%s led in term %d, echo-llm ran on %s; %s cut off from %s (not from %s): %s stepped down %s after the cut (%s %s heard the new term); %s leads in term %d %s after it; %s heard that term %s after it; held %s more: copies %v, %d decisions chained by %s, %v stale_term refusals by %s (%d chained from %s); healed: settled %s later with the one copy on %s, %s leading in term %d",
			old.name, before.Term, h.name, old.name, strings.Join(cutFrom, ", "), h.name, old.name, ms(stepped.Sub(start)), order, h.name, leader.name, now.Term, ms(election), h.name, ms(raised.Sub(start)), ms(partitionHold), stillOn, decidedByOld, old.name, staleAfter-staleBefore, h.name, refusedChained, old.name, ms(settledAfter), back.name, final.name, fv.Term),
		figure: fmt.Sprintf("new leader %s after the cut (limit %s); host's term raised %s after it; old leader stepped down %s after it; stale_term refusals %v; max copies %d; one leader %s after healing",
			ms(election), ms(electionLimit), ms(raised.Sub(start)), ms(stepped.Sub(start)), staleAfter-staleBefore, n, ms(settledAfter)),
		pass: election <= electionLimit && now.Term > before.Term && n <= 1 && moved.IsZero() && back == h && stillOn[h.name] == 1 && decidedByOld == 0,
	}
	return o
}

// freezeCutLeader is fault 11: the leader is cut off as in fault 10 and
// frozen (SIGSTOP) at the same moment, so it cannot step down: it is
// thawed (SIGCONT, still cut off) once the majority leads and the host
// heard the new term, and wakes believing it leads until its lease
// check runs. Whatever it sends the host in that moment carries its old
// term: refused stale_term, chained, changing nothing. Whether it sends
// anything is a race on waking between its tick (a describe of the
// hosts) and raft's lease check (stepping down first): the figure says
// what it did; the row passes on what must hold either way. Then the
// cut heals as in fault 10.
func freezeCutLeader(c *cluster) outcome {
	lc, err := c.prepareLeaderCut()
	if err != nil {
		return miss("%v", err)
	}
	h, old, before, rest, cutFrom, staleBefore := lc.host, lc.old, lc.before, lc.rest, lc.cutFrom, lc.staleBefore
	cut, frozen := false, false
	defer func() { // whatever happens below, it ends thawed and healed
		if frozen {
			old.process().signal(syscall.SIGCONT)
		}
		if cut {
			c.nw.sw.impair(old.name, impairment{})
		}
	}()
	w := c.watchCopies(genPkg)
	defer w.stop()
	start := time.Now()
	c.nw.sw.impair(old.name, impairment{Cut: cutFrom})
	cut = true
	old.process().signal(syscall.SIGSTOP)
	frozen = true
	var (
		leader          *node
		now             raftView
		elected, raised time.Time
	)
	err = until("a new leader of "+strings.Join(rest, ", ")+" and "+h.name+" hearing its term", waitLimit, func() bool {
		t := time.Now()
		if leader == nil {
			if l := c.leaderAmong(rest); l != nil {
				if v, err := l.raft(); err == nil && v.Term > before.Term {
					leader, now, elected = l, v, t
				}
			}
		}
		if leader != nil && raised.IsZero() {
			if term, err := h.metricWith("nodeld_host_controller_term", ""); err == nil && term >= float64(now.Term) {
				raised = t
			}
		}
		return leader != nil && !raised.IsZero()
	})
	if err != nil {
		return miss("%s cut off and frozen: %v", old.name, err)
	}
	old.process().signal(syscall.SIGCONT)
	frozen = false
	thawed := time.Now()
	var stepped time.Time
	err = until(old.name+" to step down", waitLimit, func() bool {
		v, err := old.raft()
		if err == nil && v.Role != "leader" {
			stepped = time.Now()
			return true
		}
		return false
	})
	if err != nil {
		return miss("%v", err)
	}
	time.Sleep(partitionHold) // the length of the fault, not a wait for a condition
	staleAfter, err := h.metricWith("nodeld_host_ctl_calls_total", `result="stale_term"`)
	if err != nil {
		return miss("%v", err)
	}
	stillOn := c.procCopies(genPkg)
	c.nw.sw.impair(old.name, impairment{})
	cut = false
	back, final, settledAfter, err := c.settle(time.Now())
	if err != nil {
		return miss("after the partition healed: %v", err)
	}
	snaps := w.stop()
	n := most(snaps)
	moved := first(snaps, start, func(p map[string]int) bool { return p[h.name] == 0 })
	refusedChained := 0
	if es, err := chainEntries(h.dir + "/chain.log"); err == nil {
		for _, e := range es {
			if e.Kind == "host.ctl.refused" && e.Payload["code"] == "stale_term" && e.Payload["peer"] == old.id {
				refusedChained++
			}
		}
	}
	return outcome{
		observed: fmt.Sprintf("%s led in term %d, echo-llm ran on %s; %s cut off from %s and frozen: %s leads in term %d %s later, %s heard it %s later; %s thawed %s after the cut, stepped down %s after the thaw; %v stale_term refusals by %s (%d chained from %s); copies %v; healed: settled %s later with the one copy on %s, %s leading",
			old.name, before.Term, h.name, old.name, strings.Join(cutFrom, ", "), leader.name, now.Term, ms(elected.Sub(start)), h.name, ms(raised.Sub(start)), old.name, ms(thawed.Sub(start)), ms(stepped.Sub(thawed)), staleAfter-staleBefore, h.name, refusedChained, old.name, stillOn, ms(settledAfter), back.name, final.name),
		figure: fmt.Sprintf("stale_term refusals %v (%d chained); old leader stepped down %s after the thaw; max copies %d", staleAfter-staleBefore, refusedChained, ms(stepped.Sub(thawed)), n),
		pass:   n <= 1 && moved.IsZero() && back == h && stillOn[h.name] == 1,
	}
}
