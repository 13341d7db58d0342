package engine

import (
	"container/heap"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The swap simulation: one node with declared memory for one of three
// on-demand models, clients replaying a trace, a fake clock. Its
// controller is Evict itself, asked as the controller asks it: for each
// model with requests waiting and no instance, oldest first, with the
// instances' readiness, activity and min_residency. Requests for a model
// with a ready instance are served by it at once, whatever waits for
// other models (the proxy holds requests per role, not in one queue);
// under strict first come, first served they wait behind every older
// request instead, and a demand evicts as soon as nothing is in flight
// (Grace 0).

const simModelBytes = 4 * gib

// simConfig is one run: the traces of the clients, and the policy.
type simConfig struct {
	clients [][]string // each client sends its next request when the previous is answered
	policy  EvictPolicy
	strict  bool // first come, first served across models
	load    time.Duration
	serve   time.Duration
	think   time.Duration
	minRes  time.Duration
}

type simRequest struct {
	client, seq int
	model       string
	arrived     time.Time
	answered    int
}

type simInstance struct {
	id          string
	model       string
	readySince  time.Time // zero while it loads
	lastRequest time.Time
	inFlight    int
}

type simEvent struct {
	at  time.Time
	seq int
	do  func()
}

type simEvents []simEvent

func (h simEvents) Len() int { return len(h) }
func (h simEvents) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h simEvents) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *simEvents) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *simEvents) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// simResult is what a run counts.
type simResult struct {
	swaps, loads int
	requests     []*simRequest
	finished     time.Time
	log          []string
}

type sim struct {
	t       *testing.T
	cfg     simConfig
	now     time.Time
	events  simEvents
	seq     int
	insts   []*simInstance
	held    []*simRequest // waiting, in arrival order
	res     simResult
	started int
}

func runSim(t *testing.T, cfg simConfig) simResult {
	t.Helper()
	s := &sim{t: t, cfg: cfg, now: t0}
	for c := range cfg.clients {
		s.send(c, 0)
	}
	s.control()
	for steps := 0; s.events.Len() > 0; steps++ {
		e := heap.Pop(&s.events).(simEvent)
		if e.at.Before(s.now) || steps > 100_000 {
			t.Fatalf("the simulation goes back in time or does not end\n%s", strings.Join(s.res.log, "\n"))
		}
		s.now = e.at
		e.do()
		s.control()
	}
	s.res.finished = s.now
	return s.res
}

func (s *sim) at(d time.Duration, do func()) {
	s.seq++
	heap.Push(&s.events, simEvent{at: s.now.Add(d), seq: s.seq, do: do})
}

func (s *sim) logf(format string, args ...any) {
	s.res.log = append(s.res.log, fmt.Sprintf("%8v ", s.now.Sub(t0))+fmt.Sprintf(format, args...))
}

// send has client c send request k of its trace, if any.
func (s *sim) send(c, k int) {
	if k >= len(s.cfg.clients[c]) {
		return
	}
	r := &simRequest{client: c, seq: k, model: s.cfg.clients[c][k], arrived: s.now}
	s.res.requests = append(s.res.requests, r)
	s.held = append(s.held, r)
	s.logf("client %d asks %s", c, r.model)
}

func (s *sim) instance(model string) *simInstance {
	for _, in := range s.insts {
		if in.model == model {
			return in
		}
	}
	return nil
}

// control is one pass of the proxy and the controller after an event.
func (s *sim) control() {
	// The proxy: a held request whose model is ready is served, but under
	// strict FCFS only when no older request waits for another model.
	var oldestBlocked time.Time
	var still []*simRequest
	for _, r := range s.held {
		in := s.instance(r.model)
		ready := in != nil && !in.readySince.IsZero()
		if ready && (!s.cfg.strict || oldestBlocked.IsZero()) {
			s.serve(in, r)
			continue
		}
		if !ready && oldestBlocked.IsZero() {
			oldestBlocked = r.arrived
		}
		still = append(still, r)
	}
	s.held = still

	// The controller: each model waited for and not started, oldest
	// demand first, asks Evict.
	var demands []string
	since := map[string]time.Time{}
	for _, r := range s.held {
		if s.instance(r.model) == nil && since[r.model].IsZero() {
			demands = append(demands, r.model)
			since[r.model] = r.arrived
		}
	}
	for _, m := range demands {
		ev, err := Evict(s.request(m, since[m]))
		if err != nil {
			s.t.Fatal(err)
		}
		switch ev.Outcome {
		case EvictCannot:
			if !ev.RetryAt.IsZero() {
				s.at(ev.RetryAt.Sub(s.now), func() {})
			}
			continue
		case EvictChosen:
			for _, id := range ev.Evict {
				i := slices.IndexFunc(s.insts, func(in *simInstance) bool { return in.id == id })
				if s.insts[i].inFlight > 0 {
					s.t.Fatalf("evicted %s with %d requests in flight", id, s.insts[i].inFlight)
				}
				s.logf("evict %s for %s", s.insts[i].model, m)
				s.insts = slices.Delete(s.insts, i, i+1)
				s.res.swaps++
			}
		}
		s.start(m)
	}
	if used := s.used(); used > simModelBytes {
		s.t.Fatalf("%d bytes declared on a node of %d", used, simModelBytes)
	}
}

func (s *sim) start(model string) {
	s.started++
	in := &simInstance{id: fmt.Sprintf("%s-%d", model, s.started), model: model}
	s.insts = append(s.insts, in)
	s.res.loads++
	s.logf("load %s", model)
	s.at(s.cfg.load, func() { in.readySince = s.now; s.logf("%s ready", model) })
}

func (s *sim) serve(in *simInstance, r *simRequest) {
	in.inFlight++
	s.at(s.cfg.serve, func() {
		in.inFlight--
		in.lastRequest = s.now
		r.answered++
		s.logf("%s answers client %d", r.model, r.client)
		s.at(s.cfg.think, func() { s.send(r.client, r.seq+1) })
	})
}

func (s *sim) used() uint64 { return uint64(len(s.insts)) * simModelBytes }

// request is what the controller gives Evict: the one node, its
// declared use, and every instance on it.
func (s *sim) request(model string, since time.Time) EvictRequest {
	r := EvictRequest{Kind: "inference", Name: model, Now: s.now, DemandSince: since, Policy: s.cfg.policy,
		Targets: []EvictTarget{{Node: "host", Variant: "cpu", Demand: Resources{HostBytes: simModelBytes}}},
		Nodes:   []EvictNode{{ID: "host", Capacity: Resources{HostBytes: simModelBytes}, Used: Resources{HostBytes: s.used()}}},
	}
	for _, in := range s.insts {
		r.Residents = append(r.Residents, Resident{ID: in.id, Kind: "inference", Workload: in.model, Node: "host",
			Declared: Resources{HostBytes: simModelBytes}, OnDemand: true, ReadySince: in.readySince,
			LastRequest: in.lastRequest, InFlight: in.inFlight, MinResidency: s.cfg.minRes, LoadTime: s.cfg.load})
	}
	return r
}

// checkAnswered fails unless every request of the traces was answered
// exactly once.
func checkAnswered(t *testing.T, cfg simConfig, res simResult) {
	t.Helper()
	want := 0
	for _, c := range cfg.clients {
		want += len(c)
	}
	if len(res.requests) != want {
		t.Errorf("%d requests sent, want %d\n%s", len(res.requests), want, strings.Join(res.log, "\n"))
	}
	for _, r := range res.requests {
		if r.answered != 1 {
			t.Errorf("client %d request %d (%s) answered %d times", r.client, r.seq, r.model, r.answered)
		}
	}
}

const simTrace = "A B A A C A B C"

// TestEvictSwapsFewerThanFCFS: the trace A B A A C A B C, sent in two
// interleaved client loops (the first sends the 1st, 3rd, 5th and 7th,
// the second the others, each its next when the previous is answered),
// with room for one model: the policy swaps fewer times than first come,
// first served, and every request is answered.
func TestEvictSwapsFewerThanFCFS(t *testing.T) {
	trace := strings.Fields(simTrace)
	var loops [2][]string
	for i, m := range trace {
		loops[i%2] = append(loops[i%2], m)
	}
	// A client takes a second between an answer and its next request:
	// inside the grace, so the loaded model serves it before a swap.
	base := simConfig{clients: loops[:], load: 10 * time.Second, serve: 500 * time.Millisecond,
		think: time.Second, minRes: time.Second}

	ours := base
	ours.policy = DefaultEvictPolicy()
	fcfs := base
	fcfs.policy = DefaultEvictPolicy()
	fcfs.policy.Grace, fcfs.policy.Patience = 0, 0
	fcfs.strict = true

	got, want := runSim(t, ours), runSim(t, fcfs)
	checkAnswered(t, ours, got)
	checkAnswered(t, fcfs, want)
	t.Logf("trace %q in two client loops, room for one model, load %v: swaps %d (loads %d, done at %v) with the eviction policy, %d (loads %d, done at %v) first come first served",
		simTrace, base.load, got.swaps, got.loads, got.finished.Sub(t0), want.swaps, want.loads, want.finished.Sub(t0))
	if got.swaps >= want.swaps {
		t.Errorf("the policy swapped %d times, first come first served %d: want fewer\npolicy:\n%s\nfcfs:\n%s",
			got.swaps, want.swaps, strings.Join(got.log, "\n"), strings.Join(want.log, "\n"))
	}
}

// TestEvictSequentialTrace: the same trace from one client, each request
// sent when the previous is answered: all 8 are answered, one swap per
// change of model, and the node never holds more than its memory.
func TestEvictSequentialTrace(t *testing.T) {
	cfg := simConfig{clients: [][]string{strings.Fields(simTrace)}, policy: DefaultEvictPolicy(),
		load: 10 * time.Second, serve: 500 * time.Millisecond, think: 50 * time.Millisecond, minRes: time.Second}
	res := runSim(t, cfg)
	checkAnswered(t, cfg, res)
	t.Logf("trace %q from one client: swaps %d, loads %d, done at %v", simTrace, res.swaps, res.loads, res.finished.Sub(t0))
	if res.swaps != 6 || res.loads != 7 {
		t.Errorf("swaps %d, loads %d; want 6 and 7: one per change of model\n%s", res.swaps, res.loads, strings.Join(res.log, "\n"))
	}
}
