package runner

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

func TestRestartPolicyNext(t *testing.T) {
	p := DefaultRestartPolicy()
	now := time.Unix(1_000_000, 0)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name string
		p    RestartPolicy
		past []time.Time
		want RestartDecision
	}{
		{"first restart waits the base", p, nil, RestartDecision{Delay: 2 * time.Second}},
		{"second doubles", p, []time.Time{ago(time.Second)}, RestartDecision{Recent: 1, Delay: 4 * time.Second}},
		{"third doubles again", p, []time.Time{ago(3 * time.Second), ago(time.Second)}, RestartDecision{Recent: 2, Delay: 8 * time.Second}},
		{"fourth", p, []time.Time{ago(9 * time.Second), ago(3 * time.Second), ago(time.Second)}, RestartDecision{Recent: 3, Delay: 16 * time.Second}},
		{"fifth is capped", p, []time.Time{ago(20 * time.Second), ago(9 * time.Second), ago(3 * time.Second), ago(time.Second)}, RestartDecision{Recent: 4, Delay: 30 * time.Second}},
		{"budget spent", p, []time.Time{ago(50 * time.Second), ago(20 * time.Second), ago(9 * time.Second), ago(3 * time.Second), ago(time.Second)}, RestartDecision{Recent: 5, Exhausted: true}},
		{"old restarts leave the window", p, []time.Time{ago(11 * time.Minute), ago(10 * time.Minute), ago(time.Second)}, RestartDecision{Recent: 1, Delay: 4 * time.Second}},
		{"capped", RestartPolicy{Max: 10, Window: time.Hour, Backoff: time.Second, MaxBackoff: 30 * time.Second},
			[]time.Time{ago(9), ago(8), ago(7), ago(6), ago(5), ago(4)}, RestartDecision{Recent: 6, Delay: 30 * time.Second}},
		{"cap not a power of two", RestartPolicy{Max: 100, Window: time.Hour, Backoff: 3 * time.Second, MaxBackoff: 10 * time.Second},
			[]time.Time{ago(2), ago(1)}, RestartDecision{Recent: 2, Delay: 10 * time.Second}},
		{"max zero never restarts", RestartPolicy{Max: 0, Window: time.Minute, Backoff: time.Second, MaxBackoff: time.Second}, nil, RestartDecision{Exhausted: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.p.Next(tt.past, now)); diff != "" {
				t.Errorf("Next (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRestartPolicyValidate(t *testing.T) {
	if err := DefaultRestartPolicy().Validate(); err != nil {
		t.Errorf("default policy: %v", err)
	}
	for _, p := range []RestartPolicy{
		{Max: -1, Window: time.Minute, Backoff: time.Second, MaxBackoff: time.Second},
		{Max: maxRestartsBound + 1, Window: time.Minute, Backoff: time.Second, MaxBackoff: time.Second},
		{Max: 1, Window: 0, Backoff: time.Second, MaxBackoff: time.Second},
		{Max: 1, Window: time.Minute, Backoff: 2 * time.Second, MaxBackoff: time.Second},
	} {
		if p.Validate() == nil {
			t.Errorf("Validate(%+v) = nil", p)
		}
	}
}

// fakeClock hands the backoff waits to the test, which fires them.
type fakeClock struct {
	waits chan time.Duration
	fire  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{waits: make(chan time.Duration), fire: make(chan time.Time)}
}

func (c *fakeClock) after(d time.Duration) <-chan time.Time {
	c.waits <- d
	return c.fire
}

// changes records OnChange calls.
type changes struct {
	mu  sync.Mutex
	got []State
	c   chan State // every change, buffered generously for the test
}

func newChanges() *changes { return &changes{c: make(chan State, 100)} }

func (c *changes) on(s State, _ Health) {
	c.mu.Lock()
	c.got = append(c.got, s)
	c.mu.Unlock()
	c.c <- s
}

func (c *changes) list() []State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]State(nil), c.got...)
}

// runSupervisor runs s.Run on a goroutine and returns a channel of its
// result.
func runSupervisor(ctx context.Context, s *Supervisor) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return done
}

func recvErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(testDeadline):
		t.Fatal("timed out waiting for Run to return")
		return nil
	}
}

func TestSupervisorCrashLoopFails(t *testing.T) {
	m := newTestManaged(t, Spec{Kind: KindProcess, Dir: t.TempDir(), Command: "/bin/sh", Args: []string{"-c", "exit 3"}})
	clock := newFakeClock()
	ch := newChanges()
	never := make(chan time.Time)
	s, err := NewSupervisor(m, SupervisorConfig{}, SupervisorDeps{
		Logger:   zaptest.NewLogger(t),
		Ticks:    func(time.Duration) (<-chan time.Time, func()) { return never, func() {} },
		After:    clock.after,
		OnChange: ch.on,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := runSupervisor(context.Background(), s)
	var waits []time.Duration
	for range 5 {
		select {
		case d := <-clock.waits:
			waits = append(waits, d)
			clock.fire <- time.Time{}
		case <-time.After(testDeadline):
			t.Fatal("timed out waiting for a backoff")
		}
	}
	if err := recvErr(t, done); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if diff := cmp.Diff([]time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second}, waits); diff != "" {
		t.Errorf("backoff schedule (-want +got):\n%s", diff)
	}
	state, restarts, reason := s.State()
	if state != StateFailed || restarts != 5 {
		t.Errorf("State = %s, %d restarts (%s); want failed after 5", state, restarts, reason)
	}
	if cause := s.Cause(); !errors.Is(cause, ErrRestartBudget) || !errors.Is(cause, ErrExited) {
		t.Errorf("Cause = %v, want the spent budget and the exit behind it", cause)
	}
	want := []State{StateStarting, StateRunning}
	for range 5 {
		want = append(want, StateUnhealthy, StateRestarting, StateRunning)
	}
	want = append(want, StateFailed)
	if diff := cmp.Diff(want, ch.list()); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
	if st := recvExit(t, m.Wait()); st.Code != 3 {
		t.Errorf("last exit %+v, want code 3", st)
	}
}

// fakeInstance is an Instance whose health the test sets.
type fakeInstance struct {
	mu       sync.Mutex
	health   Health
	noAnswer bool
	starts   int
	stops    int
	exit     chan ExitStatus
	started  chan struct{}
	// checked receives each health check's answer, so the test knows a
	// tick was handled before it changes the health.
	checked chan Health
}

func newFakeInstance() *fakeInstance {
	return &fakeInstance{health: HealthUp, started: make(chan struct{}, 10), checked: make(chan Health, 100)}
}

func (f *fakeInstance) Start(context.Context) error {
	f.mu.Lock()
	f.starts++
	f.exit = make(chan ExitStatus, 1)
	f.mu.Unlock()
	f.started <- struct{}{}
	return nil
}

func (f *fakeInstance) Stop(context.Context, time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stops++
	return nil
}

func (f *fakeInstance) Health(context.Context) (Health, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked <- f.health
	if f.noAnswer {
		return HealthDown, noAnswerError{context.DeadlineExceeded}
	}
	if f.health != HealthUp {
		return f.health, errors.New("not up")
	}
	return HealthUp, nil
}

func (f *fakeInstance) Wait() <-chan ExitStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exit
}

func (f *fakeInstance) setHealth(h Health) {
	f.mu.Lock()
	f.health, f.noAnswer = h, false
	f.mu.Unlock()
}

// setNoAnswer makes the health checks time out (no answer either way).
func (f *fakeInstance) setNoAnswer() {
	f.mu.Lock()
	f.health, f.noAnswer = HealthDown, true
	f.mu.Unlock()
}

// TestSupervisorHealthMissesRestartThenStop: a check that gets no answer
// leaves the instance running below the MissLimit; one that gets an
// answer that it is down makes it unhealthy at once (its role is
// withdrawn) and one that finds it up makes it running again; every
// missed check and every change for the worse is a warning; the
// MissLimit-th miss in a row restarts it after the backoff.
func TestSupervisorHealthMissesRestartThenStop(t *testing.T) {
	inst := newFakeInstance()
	clock := newFakeClock()
	ch := newChanges()
	ticks := make(chan time.Time)
	core, logs := observer.New(zap.InfoLevel)
	s, err := NewSupervisor(inst, SupervisorConfig{MissLimit: 3}, SupervisorDeps{
		Logger:   zap.New(core),
		Ticks:    func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} },
		After:    clock.after,
		OnChange: ch.on,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runSupervisor(ctx, s)
	expect := func(want State) {
		t.Helper()
		select {
		case got := <-ch.c:
			if got != want {
				t.Fatalf("state %s, want %s", got, want)
			}
		case <-time.After(testDeadline):
			t.Fatalf("timed out waiting for %s", want)
		}
	}
	expectNone := func() {
		t.Helper()
		select {
		case got := <-ch.c:
			t.Fatalf("state %s, want no change", got)
		default:
		}
	}
	expect(StateStarting)
	expect(StateRunning)
	tick := func() {
		t.Helper()
		ticks <- time.Time{}
		select {
		case <-inst.checked:
		case <-time.After(testDeadline):
			t.Fatal("timed out waiting for a health check")
		}
	}
	warnings := func() int { return logs.FilterLevelExact(zap.WarnLevel).Len() }
	tick() // healthy: nothing changes
	inst.setNoAnswer()
	tick() // no answer: a miss, still running
	tick()
	inst.setHealth(HealthUp)
	tick() // answered up: the count resets
	expectNone()
	if n := logs.FilterMessage("managed instance health check missed").Len(); n != 2 {
		t.Errorf("%d missed checks logged, want 2", n)
	}
	if st, _, _ := s.State(); st != StateRunning {
		t.Fatalf("state %s after checks that got no answer, want running", st)
	}
	inst.setHealth(HealthDown)
	w := warnings()
	tick() // an answer that it is down: unhealthy at once
	expect(StateUnhealthy)
	if st, _, reason := s.State(); st != StateUnhealthy || !errors.Is(s.Cause(), ErrHealthCheck) || reason == "" {
		t.Errorf("after one failed check: %s (%s), cause %v", st, reason, s.Cause())
	}
	if got := warnings() - w; got != 2 {
		t.Errorf("%d warnings for a failed check that left running, want 2 (the miss, the change)", got)
	}
	inst.setHealth(HealthUp)
	tick() // up again: running, no restart
	expect(StateRunning)
	inst.setHealth(HealthDown)
	tick()
	expect(StateUnhealthy)
	tick()
	tick() // the third in a row: restart after the backoff
	expect(StateUnhealthy)
	if d := <-clock.waits; d != 2*time.Second {
		t.Errorf("first backoff %s, want 2s", d)
	}
	inst.setHealth(HealthUp)
	clock.fire <- time.Time{}
	expect(StateRestarting)
	expect(StateRunning)
	if _, n, _ := s.State(); n != 1 {
		t.Errorf("restarts %d, want 1", n)
	}
	// A crash is noticed without a tick.
	inst.mu.Lock()
	inst.exit <- ExitStatus{Code: 1}
	inst.mu.Unlock()
	expect(StateUnhealthy)
	if !errors.Is(s.Cause(), ErrExited) {
		t.Errorf("cause after an exit: %v", s.Cause())
	}
	<-clock.waits // the second backoff: Stop cancels it
	s.Stop()
	if err := recvErr(t, done); err != nil {
		t.Fatalf("Run = %v", err)
	}
	expect(StateStopped)
	if s.Cause() != nil {
		t.Errorf("cause when stopped: %v", s.Cause())
	}
	for _, e := range logs.FilterMessage("managed instance state").All() {
		to := e.ContextMap()["to"]
		if bad := worse(State(to.(string))); bad != (e.Level == zap.WarnLevel) {
			t.Errorf("state change to %v logged at %s", to, e.Level)
		}
	}
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.starts != 2 || inst.stops != 2 {
		t.Errorf("starts %d stops %d, want 2 and 2 (restart, shutdown)", inst.starts, inst.stops)
	}
}

func TestSupervisorRunTwiceAndConfig(t *testing.T) {
	if _, err := NewSupervisor(nil, SupervisorConfig{}, SupervisorDeps{}); err == nil {
		t.Error("nil instance accepted")
	}
	for _, cfg := range []SupervisorConfig{
		{HealthInterval: time.Microsecond},
		{MissLimit: -1},
		{Policy: RestartPolicy{Max: 1}},
		{StopGrace: time.Hour},
	} {
		if _, err := NewSupervisor(newFakeInstance(), cfg, SupervisorDeps{}); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	inst := newFakeInstance()
	never := make(chan time.Time)
	s, err := NewSupervisor(inst, SupervisorConfig{}, SupervisorDeps{
		Ticks: func(time.Duration) (<-chan time.Time, func()) { return never, func() {} },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runSupervisor(ctx, s)
	<-inst.started
	if err := s.Run(ctx); !errors.Is(err, ErrSupervisorRunning) {
		t.Errorf("second Run = %v", err)
	}
	cancel()
	if err := recvErr(t, done); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := s.State(); st != StateStopped {
		t.Errorf("state %s after cancel", st)
	}
}
