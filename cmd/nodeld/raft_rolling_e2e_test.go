package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/plane"
)

// rollingAnswer is the outcome of one request of the rolling restart's
// client: nil err and code 200 with the echo is a success.
type rollingAnswer struct {
	code int
	err  error
	body string
}

// driveRole sends short chat requests to base one after another until
// stop is closed, and returns every outcome; done counts those answered
// so far.
func driveRole(base string, stop <-chan struct{}, done *atomic.Int64) []rollingAnswer {
	client := &http.Client{Timeout: 10 * time.Second}
	var out []rollingAnswer
	for i := 0; ; i++ {
		select {
		case <-stop:
			return out
		default:
		}
		msg := fmt.Sprintf("rolling %d", i)
		res, err := client.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"echo-1","messages":[{"role":"user","content":"`+msg+`"}]}`))
		if err != nil {
			out = append(out, rollingAnswer{err: err})
			continue
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		a := rollingAnswer{code: res.StatusCode, err: err, body: string(b)}
		if err == nil && (res.StatusCode != http.StatusOK || !strings.Contains(a.body, "echo: "+msg)) {
			a.err = fmt.Errorf("answer %d %q", res.StatusCode, a.body)
		}
		out = append(out, a)
		done.Add(1)
	}
}

// decisionIDs returns the hashes of the plane.decision entries of the
// node's chain, in order.
func (mn *mnode) decisionIDs() []string {
	mn.m.t.Helper()
	var ids []string
	for _, e := range mn.find(plane.KindDecision, nil) {
		ids = append(ids, e.Hash)
	}
	return ids
}

// TestRaftControllersRollingRestart (issue 25 acceptance 4, in process):
// three controllers a, b and c in raft; host d runs a workload the leader
// placed, and serves its role chat to the consumer e, whose role port a
// client drives throughout. The controllers restart one at a time (the
// followers, then the leader), each back and following the leader before
// the next goes; requests are answered while each is down, and the
// leader's restart makes an election (the term rises). No request fails; the placement keeps its decision id in
// every replica, d runs its one instance throughout (same instance, no
// restart), and no controller chains a new plane.decision.
func TestRaftControllersRollingRestart(t *testing.T) {
	t.Parallel()
	dir, anchor := meshLightPackage(t) // built once per test binary (seconds under -race)
	t0 := time.Now()
	all := []string{"a", "b", "c", "d", "e"}
	ctrls := []string{"a", "b", "c"}
	m := newMesh(t, all...)
	keys := make([]string, len(ctrls))
	for i, n := range ctrls {
		keys[i] = m.node(n).key
	}
	peersOf := func(self string) []peer {
		var ps []peer
		for _, n := range all {
			if n != self {
				ps = append(ps, peer{name: n, tier: "paired"})
			}
		}
		return ps
	}
	nodes := map[string]*mnode{}
	d := m.config("d", peersOf("d"), meshHost(strings.Join(keys, ", "), anchor))
	d = strings.Replace(d, odRoleSection, odRoleSection+"      expose: true\n      serve_to: [e]\n", 1)
	e := strings.Replace(m.config("e", peersOf("e"), ""), odRoleSection, odRoleSection+"      use_from: [d]\n", 1)
	nodes["d"] = m.start("d", d)
	nodes["e"] = m.start("e", e)
	for _, n := range ctrls {
		var voters []string
		for _, v := range ctrls {
			if v != n {
				voters = append(voters, v)
			}
		}
		extra := "  voters: [" + strings.Join(voters, ", ") + "]\n  policy:\n    kinds:\n      inference: {min_tier: paired}\n    deny_nodes: [a, b, c, e]\n"
		cfg := strings.Replace(meshController(anchor, ""), "  policy:\n    kinds:\n      inference: {min_tier: paired}\n", extra, 1)
		m.node(n).bootWait = -1 // a new cluster: nothing to wait for
		nodes[n] = m.start(n, m.config(n, peersOf(n), cfg))
	}
	idD := m.id("d")
	leader, took := raftLeader(t, nodes, ctrls...)
	t.Logf("five nodes up, %s leads after %v more", leader.name, took.Round(time.Millisecond))
	leader, res, rc, errOut := placeOnRaftLeader(t, nodes, dir, idD, ctrls...)
	if rc != 0 || res.Outcome != "placed" || res.Node != idD {
		t.Fatalf("place on the leader %s = %d %+v\n%s", leader.name, rc, res, errOut)
	}
	base := nodes["e"].roleBase()
	waitFor(t, "e to be served chat by d", func() bool {
		a := postOD(base, "warm")
		return a.err == nil && a.code == http.StatusOK && a.route == idD
	})
	insts := nodes["d"].instances()
	if len(insts) != 1 || insts[0].DecisionID != res.DecisionID {
		t.Fatalf("d runs %+v, want one instance of decision %s", insts, res.DecisionID)
	}
	before := map[string][]string{}
	for _, n := range ctrls {
		waitFor(t, n+"'s replica to hold the placement", func() bool { return hasPlacement(nodes[n].ctrl(), res.DecisionID, idD) })
		before[n] = nodes[n].decisionIDs()
	}
	if !slices.Contains(before[leader.name], res.DecisionID) {
		t.Fatalf("the leader %s did not chain decision %s: %v", leader.name, res.DecisionID, before[leader.name])
	}

	t.Logf("placed %.8s on d, served to e; rolling restart begins", res.DecisionID)
	stop := make(chan struct{})
	var answers []rollingAnswer
	var answered atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { answers = driveRole(base, stop, &answered) })
	defer func() { // a failed check below still stops the client
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}()

	// The followers first, then the leader: each restart ends with the
	// node back, following the leader of the moment, with the placement
	// in its replica; the leader ticks (the clock a tick on) meanwhile.
	order := slices.DeleteFunc(slices.Clone(ctrls), func(n string) bool { return n == leader.name })
	order = append(order, leader.name)
	for _, name := range order {
		mn := nodes[name]
		start := time.Now()
		wasLeader, term := name == leader.name, leader.ctrl().Leadership().Term
		// Requests go on through the restart: some are answered while the
		// controller is down.
		mn.kill()
		down := answered.Load()
		waitFor(t, "requests answered while "+name+" is down", func() bool { return answered.Load() >= down+3 })
		mn.run()
		leader, _ = raftLeader(t, nodes, ctrls...)
		now := leader.ctrl().Leadership().Term
		if wasLeader && now <= term {
			t.Fatalf("the leader %s restarted, yet %s leads in term %d, not past %d", name, leader.name, now, term)
		}
		waitFor(t, leader.name+" to lead (its state rebuilt)", func() bool {
			leader.tick() // the harness ticks by hand; a tick takes the lead
			return leader.ctrl().Term() != 0
		})
		waitFor(t, name+" to follow "+leader.name, func() bool {
			info := mn.ctrl().Leadership()
			return name == leader.name || info.Role == plane.RoleFollower && info.Leader == m.id(leader.name)
		})
		waitFor(t, name+"'s replica to hold the placement", func() bool { return hasPlacement(mn.ctrl(), res.DecisionID, idD) })
		leader.waitAlive(idD)
		for range 2 {
			m.clock.Advance(time.Second)
			leader.tick()
		}
		t.Logf("%s restarted; %s leads in term %d; settled %v after the restart began", name, leader.name, leader.ctrl().Term(), time.Since(start).Round(time.Millisecond))
	}
	close(stop)
	wg.Wait()

	failed := 0
	var first error
	for _, a := range answers {
		if a.err != nil {
			failed++
			if first == nil {
				first = a.err
			}
		}
	}
	t.Logf("%d requests during the rolling restart, %d failed; the test ran %v after its package", len(answers), failed, time.Since(t0).Round(time.Millisecond))
	if len(answers) == 0 || failed > 0 {
		t.Fatalf("%d/%d requests failed during the rolling restart; first: %v", failed, len(answers), first)
	}
	for _, n := range ctrls {
		ps := nodes[n].ctrl().Placements()
		if len(ps) != 1 || ps[0].DecisionID != res.DecisionID || ps[0].Node != idD {
			t.Errorf("%s's placements after the rolling restart: %+v, want only decision %s on d", n, ps, res.DecisionID)
		}
		if after := nodes[n].decisionIDs(); !slices.Equal(after, before[n]) {
			t.Errorf("%s chained decisions %v during the rolling restart (before: %v)", n, after, before[n])
		}
	}
	got := nodes["d"].instances()
	if len(got) != 1 || got[0].InstanceID != insts[0].InstanceID || got[0].DecisionID != res.DecisionID || got[0].Restarts != 0 {
		t.Fatalf("d runs %+v after the rolling restart, want its one instance %s untouched", got, insts[0].InstanceID)
	}
}
