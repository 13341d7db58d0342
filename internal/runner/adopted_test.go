package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/runner/runnertest"
	"github.com/nodeld/nodeld/internal/testport"
)

// reg is one registration as the fake registrar holds it.
type reg struct {
	Base, Model, API, Runtime string
}

// regCall is one call the fake registrar or one of its slots received.
type regCall struct {
	Op   string // "register", "update" or "release"
	Role string
	Base string
}

// fakeRegistrar records calls and keeps the current registrations. The
// Adopter is its only writer, so a role has at most one registration and it
// always serves.
type fakeRegistrar struct {
	mu      sync.Mutex // guards the fields below and every fakeSlot's
	current map[string]reg
	calls   []regCall
	refuse  map[string]error // role -> error RegisterLocal and Update return
	// outranked roles are served by another writer's registration (a
	// placed instance): the Adopter's stands by.
	outranked map[string]bool
}

var _ Registrar = (*fakeRegistrar)(nil)

func (f *fakeRegistrar) RegisterLocal(role, base, model, api, runtime string) (LocalSlot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, regCall{"register", role, base})
	if err := f.refuse[role]; err != nil {
		return nil, err
	}
	if f.current == nil {
		f.current = make(map[string]reg)
	}
	if _, dup := f.current[role]; dup {
		return nil, errors.New("fake registrar: a second registration of " + role + " by the adopter")
	}
	f.current[role] = reg{base, model, api, runtime}
	return &fakeSlot{f: f, role: role}, nil
}

// fakeSlot is a registration the fake registrar handed out.
type fakeSlot struct {
	f        *fakeRegistrar
	role     string
	released bool // guarded by f.mu
}

func (s *fakeSlot) Update(base, model, api, runtime string) error {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, regCall{"update", s.role, base})
	if s.released {
		return errors.New("fake slot released")
	}
	if err := f.refuse[s.role]; err != nil {
		return err
	}
	f.current[s.role] = reg{base, model, api, runtime}
	return nil
}

func (s *fakeSlot) Release() {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.released {
		return
	}
	s.released = true
	f.calls = append(f.calls, regCall{"release", s.role, ""})
	delete(f.current, s.role)
}

func (s *fakeSlot) Serving() bool {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return !s.released && !s.f.outranked[s.role]
}

func (f *fakeRegistrar) snapshot() map[string]reg {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]reg, len(f.current))
	for k, v := range f.current {
		out[k] = v
	}
	return out
}

func (f *fakeRegistrar) takeCalls() []regCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// fakeTicker fires only when the test says so.
type fakeTicker struct {
	c chan time.Time

	mu     sync.Mutex // guards resets
	resets []time.Duration
}

func (f *fakeTicker) Chan() <-chan time.Time { return f.c }
func (f *fakeTicker) Stop()                  {}
func (f *fakeTicker) Reset(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resets = append(f.resets, d)
}

// harness runs an Adopter with a fake ticker and a round signal.
type harness struct {
	a      *Adopter
	reg    *fakeRegistrar
	ticker *fakeTicker
	prom   *prometheus.Registry
	rounds chan struct{}
	cancel context.CancelFunc
	done   chan error
}

const waitLimit = 10 * time.Second

func startAdopter(t *testing.T, cfg AdopterConfig, fr *fakeRegistrar) *harness {
	t.Helper()
	if fr == nil {
		fr = &fakeRegistrar{}
	}
	h := &harness{
		reg:    fr,
		ticker: &fakeTicker{c: make(chan time.Time)},
		prom:   prometheus.NewRegistry(),
		rounds: make(chan struct{}),
		done:   make(chan error, 1),
	}
	a, err := NewAdopter(cfg, fr, zaptest.NewLogger(t), h.prom)
	if err != nil {
		t.Fatalf("NewAdopter: %v", err)
	}
	h.a = a
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	a.newTicker = func(time.Duration) ticker { return h.ticker }
	a.afterRound = func() {
		select {
		case h.rounds <- struct{}{}:
		case <-ctx.Done():
		}
	}
	go func() { h.done <- a.Run(ctx) }()
	t.Cleanup(func() { h.stop(t) })
	h.waitRound(t) // the round Run does at start
	return h
}

func (h *harness) waitRound(t *testing.T) {
	t.Helper()
	select {
	case <-h.rounds:
	case <-time.After(waitLimit):
		t.Fatal("no probe round completed")
	}
}

// tickRound fires the ticker once and waits for the round it starts.
func (h *harness) tickRound(t *testing.T) {
	t.Helper()
	select {
	case h.ticker.c <- time.Now():
	case <-time.After(waitLimit):
		t.Fatal("Run did not take the tick")
	}
	h.waitRound(t)
}

func (h *harness) stop(t *testing.T) {
	t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not return after cancel")
	}
}

func (h *harness) wantRegs(t *testing.T, want map[string]reg) {
	t.Helper()
	if diff := cmp.Diff(want, h.reg.snapshot(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("registrations (-want +got):\n%s", diff)
	}
}

func (h *harness) health(t *testing.T) []Health {
	t.Helper()
	return healthOf(h.a)
}

// freeAddr returns a 127.0.0.1 address nothing listens on, reserved
// until t ends.
func freeAddr(t *testing.T) string {
	t.Helper()
	return testport.Addr(t)
}

func TestAdopterRegistersAndDiscovers(t *testing.T) {
	tests := []struct {
		kind   Kind
		models []string
		model  string // configured
		want   string // registered model
	}{
		{KindLlamaCpp, []string{"/m/q.gguf"}, "", "/m/q.gguf"},
		{KindLlamaCpp, []string{"/m/q.gguf"}, "q", "q"},
		{KindOllama, []string{"llama3:latest"}, "", "llama3:latest"},
		{KindOllama, []string{"llama3:latest", "qwen:7b"}, "qwen:7b", "qwen:7b"},
		{KindMLXLM, []string{"mlx-community/Qwen-4bit", "other"}, "", "mlx-community/Qwen-4bit"},
		{KindOpenAI, []string{"gpt-x"}, "", "gpt-x"},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind)+"/"+tt.model, func(t *testing.T) {
			srv := runnertest.NewServer(t, string(tt.kind), tt.models...)
			url := "http://localhost:" + srv.Addr[strings.LastIndexByte(srv.Addr, ':')+1:]
			h := startAdopter(t, AdopterConfig{Instances: []AdoptedInstance{{Role: "chat", Kind: tt.kind, URL: url, Model: tt.model}}}, nil)
			// localhost is registered as the IP literal the table accepts.
			h.wantRegs(t, map[string]reg{"chat": {srv.URL, tt.want, "openai", string(tt.kind)}})
			got := h.a.Status()
			want := []InstanceStatus{{Role: "chat", Kind: string(tt.kind), URL: url, Model: tt.want, Health: HealthUp, Serving: true}}
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(InstanceStatus{}, "LastProbe")); diff != "" {
				t.Errorf("Status (-want +got):\n%s", diff)
			}
			if got[0].LastProbe.IsZero() {
				t.Error("LastProbe not set")
			}
		})
	}
}

func TestAdopterDownAndBackWithinOneInterval(t *testing.T) {
	addr := freeAddr(t)
	srv := runnertest.NewServerAt(t, addr, "llama.cpp", "/m/q.gguf")
	h := startAdopter(t, AdopterConfig{Instances: []AdoptedInstance{{Role: "chat", Kind: KindLlamaCpp, URL: srv.URL}}}, nil)
	up := map[string]reg{"chat": {srv.URL, "/m/q.gguf", "openai", "llama.cpp"}}
	h.wantRegs(t, up)

	srv.Close()
	h.tickRound(t)
	h.wantRegs(t, nil)
	st := h.a.Status()[0]
	if st.Health != HealthDown || st.Serving || st.LastError == "" {
		t.Errorf("after close: status %+v, want down, not serving, with an error", st)
	}

	runnertest.NewServerAt(t, addr, "llama.cpp", "/m/q.gguf")
	h.tickRound(t)
	h.wantRegs(t, up)
	want := []regCall{{"register", "chat", srv.URL}, {"release", "chat", ""}, {"register", "chat", srv.URL}}
	if diff := cmp.Diff(want, h.reg.takeCalls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}

	// A round with nothing changed calls nothing.
	h.tickRound(t)
	if calls := h.reg.takeCalls(); len(calls) != 0 {
		t.Errorf("steady round made calls %v", calls)
	}
}

func TestAdopterLoadingIsNotUp(t *testing.T) {
	srv := runnertest.NewServer(t, "llama.cpp", "/m/q.gguf")
	srv.SetLoading(true)
	h := startAdopter(t, AdopterConfig{Instances: []AdoptedInstance{{Role: "chat", Kind: KindLlamaCpp, URL: srv.URL}}}, nil)
	h.wantRegs(t, nil)
	if diff := cmp.Diff([]Health{HealthLoading}, h.health(t)); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}
	srv.SetLoading(false)
	h.tickRound(t)
	h.wantRegs(t, map[string]reg{"chat": {srv.URL, "/m/q.gguf", "openai", "llama.cpp"}})

	// Loading again (a model swap) withdraws the role.
	srv.SetLoading(true)
	h.tickRound(t)
	h.wantRegs(t, nil)
}

func TestAdopterOllamaModelMissing(t *testing.T) {
	srv := runnertest.NewServer(t, "ollama", "qwen2.5:7b")
	h := startAdopter(t, AdopterConfig{Instances: []AdoptedInstance{{Role: "chat", Kind: KindOllama, URL: srv.URL, Model: "llama3"}}}, nil)
	h.wantRegs(t, nil)
	if diff := cmp.Diff([]Health{HealthModelMissing}, h.health(t)); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}
	srv.SetModels("qwen2.5:7b", "llama3:latest")
	h.tickRound(t)
	h.wantRegs(t, map[string]reg{"chat": {srv.URL, "llama3", "openai", "ollama"}})
}

func TestAdopterFirstHealthyWins(t *testing.T) {
	b := runnertest.NewServer(t, "openai", "model-b")
	c := runnertest.NewServer(t, "openai", "model-c")
	other := runnertest.NewServer(t, "openai", "embed-1")
	// Reserved after the other servers are listening, so none of them can
	// be given the port A comes up on later.
	addrA := freeAddr(t)
	cfg := AdopterConfig{Instances: []AdoptedInstance{
		{Role: "chat", Kind: KindOpenAI, URL: "http://" + addrA},
		{Role: "chat", Kind: KindOpenAI, URL: b.URL},
		{Role: "embed", Kind: KindOpenAI, URL: other.URL},
		{Role: "chat", Kind: KindOpenAI, URL: c.URL},
	}}
	h := startAdopter(t, cfg, nil)
	embed := reg{other.URL, "embed-1", "openai", "openai"}
	h.wantRegs(t, map[string]reg{"chat": {b.URL, "model-b", "openai", "openai"}, "embed": embed})
	serving := func() []bool {
		var out []bool
		for _, s := range h.a.Status() {
			out = append(out, s.Serving)
		}
		return out
	}
	if diff := cmp.Diff([]bool{false, true, true, false}, serving()); diff != "" {
		t.Errorf("serving (-want +got):\n%s", diff)
	}

	// A, earlier in config order, comes up and takes over.
	a := runnertest.NewServerAt(t, addrA, "openai", "model-a")
	h.tickRound(t)
	h.wantRegs(t, map[string]reg{"chat": {a.URL, "model-a", "openai", "openai"}, "embed": embed})
	if diff := cmp.Diff([]bool{true, false, true, false}, serving()); diff != "" {
		t.Errorf("serving (-want +got):\n%s", diff)
	}

	// A and B go: C serves. The role is never released on the way: the
	// Adopter's registration moves to C.
	a.Close()
	b.Close()
	h.reg.takeCalls()
	h.tickRound(t)
	h.wantRegs(t, map[string]reg{"chat": {c.URL, "model-c", "openai", "openai"}, "embed": embed})
	if diff := cmp.Diff([]regCall{{"update", "chat", c.URL}}, h.reg.takeCalls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}

	// None left: deregistered.
	c.Close()
	h.tickRound(t)
	h.wantRegs(t, map[string]reg{"embed": embed})
}

func TestAdopterApplyConfig(t *testing.T) {
	chat := runnertest.NewServer(t, "llama.cpp", "/m/chat.gguf")
	coder := runnertest.NewServer(t, "ollama", "coder:7b")
	h := startAdopter(t, AdopterConfig{Instances: []AdoptedInstance{{Role: "chat", Kind: KindLlamaCpp, URL: chat.URL}}}, nil)
	h.wantRegs(t, map[string]reg{"chat": {chat.URL, "/m/chat.gguf", "openai", "llama.cpp"}})

	// An invalid config changes nothing.
	bad := AdopterConfig{Instances: []AdoptedInstance{{Role: "coder", Kind: KindOllama, URL: "http://10.1.1.1:11434"}}}
	if err := h.a.ApplyConfig(bad); !errors.Is(err, ErrNotLoopback) {
		t.Fatalf("ApplyConfig(non-loopback) = %v, want ErrNotLoopback", err)
	}
	h.wantRegs(t, map[string]reg{"chat": {chat.URL, "/m/chat.gguf", "openai", "llama.cpp"}})
	if n := len(h.a.Status()); n != 1 {
		t.Fatalf("%d instances after a refused reload, want 1", n)
	}

	next := AdopterConfig{
		Instances: []AdoptedInstance{{Role: "coder", Kind: KindOllama, URL: coder.URL}},
		Interval:  time.Second,
	}
	if err := h.a.ApplyConfig(next); err != nil {
		t.Fatalf("ApplyConfig: %v", err)
	}
	// The dropped role is gone when ApplyConfig returns (the reload round
	// may already be running, so only chat is checked here)...
	if _, ok := h.reg.snapshot()["chat"]; ok {
		t.Error("chat still registered when ApplyConfig returned")
	}
	// ...and the new one is probed at once, without a tick.
	h.waitRound(t)
	h.wantRegs(t, map[string]reg{"coder": {coder.URL, "coder:7b", "openai", "ollama"}})
	h.ticker.mu.Lock()
	resets := h.ticker.resets
	h.ticker.mu.Unlock()
	if diff := cmp.Diff([]time.Duration{time.Second}, resets); diff != "" {
		t.Errorf("ticker resets (-want +got):\n%s", diff)
	}

	// An instance kept across a reload keeps its registration: it is never
	// withdrawn, not even for the reload round.
	h.reg.takeCalls()
	if err := h.a.ApplyConfig(AdopterConfig{Instances: []AdoptedInstance{
		{Role: "chat", Kind: KindLlamaCpp, URL: chat.URL},
		{Role: "coder", Kind: KindOllama, URL: coder.URL},
	}, Interval: time.Second}); err != nil {
		t.Fatalf("ApplyConfig: %v", err)
	}
	if _, ok := h.reg.snapshot()["coder"]; !ok {
		t.Error("coder withdrawn by a reload that kept it")
	}
	h.waitRound(t)
	h.wantRegs(t, map[string]reg{
		"chat":  {chat.URL, "/m/chat.gguf", "openai", "llama.cpp"},
		"coder": {coder.URL, "coder:7b", "openai", "ollama"},
	})
	if diff := cmp.Diff([]regCall{{"register", "chat", chat.URL}}, h.reg.takeCalls()); diff != "" {
		t.Errorf("calls across the reload (-want +got):\n%s", diff)
	}
}

func TestAdopterRunDeregistersOnShutdown(t *testing.T) {
	chat := runnertest.NewServer(t, "openai", "m1")
	embed := runnertest.NewServer(t, "openai", "m2")
	fr := &fakeRegistrar{}
	h := startAdopter(t, AdopterConfig{Instances: []AdoptedInstance{
		{Role: "chat", Kind: KindOpenAI, URL: chat.URL},
		{Role: "embed", Kind: KindOpenAI, URL: embed.URL},
	}}, fr)
	if n := len(fr.snapshot()); n != 2 {
		t.Fatalf("%d roles registered, want 2", n)
	}
	h.stop(t)
	h.wantRegs(t, nil)
	for _, s := range h.a.Status() {
		if s.Serving {
			t.Errorf("%s still serving after shutdown", s.Role)
		}
	}
}

func TestAdopterRunTwice(t *testing.T) {
	h := startAdopter(t, AdopterConfig{}, nil)
	if err := h.a.Run(t.Context()); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("second Run = %v, want ErrAlreadyRunning", err)
	}
}

func TestAdopterRegistrationRefused(t *testing.T) {
	a := runnertest.NewServer(t, "openai", "m-a")
	b := runnertest.NewServer(t, "openai", "m-b")
	fr := &fakeRegistrar{}
	h := startAdopter(t, AdopterConfig{Instances: []AdoptedInstance{
		{Role: "chat", Kind: KindOpenAI, URL: a.URL},
		{Role: "embed", Kind: KindOpenAI, URL: b.URL},
	}}, fr)
	h.wantRegs(t, map[string]reg{"chat": {a.URL, "m-a", "openai", "openai"}, "embed": {b.URL, "m-b", "openai", "openai"}})

	// The table now refuses chat (say, a conflicting registration): the
	// adopter must not keep believing it serves chat, and must retry.
	fr.mu.Lock()
	fr.refuse = map[string]error{"chat": errors.New("refused")}
	fr.mu.Unlock()
	a.SetModels("m-a2") // a change, so the adopter registers again
	h.tickRound(t)
	h.wantRegs(t, map[string]reg{"embed": {b.URL, "m-b", "openai", "openai"}})
	if h.a.Status()[0].Serving {
		t.Error("chat reported serving after a refused registration")
	}
	fr.mu.Lock()
	fr.refuse = nil
	fr.mu.Unlock()
	h.tickRound(t)
	h.wantRegs(t, map[string]reg{"chat": {a.URL, "m-a2", "openai", "openai"}, "embed": {b.URL, "m-b", "openai", "openai"}})
}

// TestAdopterServingFollowsTheElection: an instance whose registration
// stands by for another writer's (a placed instance) is not reported
// serving, and is again once it is elected.
func TestAdopterServingFollowsTheElection(t *testing.T) {
	srv := runnertest.NewServer(t, "openai", "m")
	fr := &fakeRegistrar{outranked: map[string]bool{"chat": true}}
	h := startAdopter(t, AdopterConfig{Instances: []AdoptedInstance{{Role: "chat", Kind: KindOpenAI, URL: srv.URL}}}, fr)
	h.wantRegs(t, map[string]reg{"chat": {srv.URL, "m", "openai", "openai"}})
	if st := h.a.Status()[0]; st.Serving {
		t.Errorf("status %+v: serving while another registration is elected", st)
	}
	fr.mu.Lock()
	fr.outranked = nil
	fr.mu.Unlock()
	if st := h.a.Status()[0]; !st.Serving {
		t.Errorf("status %+v: not serving once elected", st)
	}
}

func TestAdopterMetrics(t *testing.T) {
	addr := freeAddr(t)
	srv := runnertest.NewServerAt(t, addr, "openai", "m")
	h := startAdopter(t, AdopterConfig{Instances: []AdoptedInstance{{Role: "chat", Kind: KindOpenAI, URL: srv.URL}}}, nil)
	srv.Close()
	h.tickRound(t)

	got := gather(t, h.prom)
	want := map[string]float64{
		`nodeld_runtime_instance_up{instance="` + addr + `",role="chat"}`: 0,
		`nodeld_runtime_probes_total{result="up",role="chat"}`:            1,
		`nodeld_runtime_probes_total{result="down",role="chat"}`:          1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}

	// A dropped instance's gauge goes away.
	if err := h.a.ApplyConfig(AdopterConfig{}); err != nil {
		t.Fatal(err)
	}
	h.waitRound(t)
	for k := range gather(t, h.prom) {
		if strings.HasPrefix(k, "nodeld_runtime_instance_up") {
			t.Errorf("gauge %s left after its instance was dropped", k)
		}
	}
}

// gather flattens the registry into "name{labels}" -> value.
func gather(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]float64)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

// TestAdopterIntervalRealTicker checks the real ticker path in fake time:
// a round at start, then one per Interval, and a shorter Interval from
// ApplyConfig takes effect.
func TestAdopterIntervalRealTicker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := NewAdopter(AdopterConfig{Interval: 5 * time.Second}, &fakeRegistrar{}, zaptest.NewLogger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu     sync.Mutex
			rounds []time.Duration
		)
		start := time.Now()
		a.afterRound = func() {
			mu.Lock()
			defer mu.Unlock()
			rounds = append(rounds, time.Since(start))
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- a.Run(ctx) }()

		time.Sleep(12 * time.Second) // fake time: rounds at 0, 5, 10
		synctest.Wait()
		if err := a.ApplyConfig(AdopterConfig{Interval: time.Second}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond) // reload round at 12, then 13, 14
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		want := []time.Duration{0, 5 * time.Second, 10 * time.Second, 12 * time.Second, 13 * time.Second, 14 * time.Second}
		if diff := cmp.Diff(want, rounds); diff != "" {
			t.Errorf("round times (-want +got):\n%s", diff)
		}
	})
}

// TestApplyConfigWithoutRun drives rounds by hand (no Run), so the state
// between a reload and the next round can be checked deterministically.
func TestApplyConfigWithoutRun(t *testing.T) {
	chat := runnertest.NewServer(t, "openai", "m-chat")
	coder := runnertest.NewServer(t, "openai", "m-coder")
	fr := &fakeRegistrar{}
	keep := AdoptedInstance{Role: "chat", Kind: KindOpenAI, URL: chat.URL}
	a, err := NewAdopter(AdopterConfig{Instances: []AdoptedInstance{keep}}, fr, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	a.round(t.Context())
	if _, ok := fr.snapshot()["chat"]; !ok {
		t.Fatal("chat not registered after a round")
	}

	// A round that started before a reload is discarded.
	a.mu.Lock()
	staleGen := a.gen
	a.mu.Unlock()
	added := AdoptedInstance{Role: "coder", Kind: KindOpenAI, URL: coder.URL}
	if err := a.ApplyConfig(AdopterConfig{Instances: []AdoptedInstance{added, keep}}); err != nil {
		t.Fatal(err)
	}
	upOutcome := probeOutcome{res: ProbeResult{Health: HealthUp, Model: "x"}, at: time.Now()}
	a.apply(staleGen, []probeOutcome{upOutcome}, nil, nil)
	if _, ok := fr.snapshot()["coder"]; ok {
		t.Error("a stale round registered coder")
	}

	// The kept instance keeps its last probe; the new one is unknown.
	if diff := cmp.Diff([]Health{HealthUnknown, HealthUp}, healthOf(a)); diff != "" {
		t.Errorf("health after reload (-want +got):\n%s", diff)
	}
	select {
	case <-a.reload:
	default:
		t.Error("ApplyConfig did not request a round")
	}
	// A second reload before any round does not block.
	if err := a.ApplyConfig(AdopterConfig{Instances: []AdoptedInstance{added, keep}}); err != nil {
		t.Fatal(err)
	}
	if err := a.ApplyConfig(AdopterConfig{Instances: []AdoptedInstance{added, keep}}); err != nil {
		t.Fatal(err)
	}
	a.round(t.Context())
	if diff := cmp.Diff([]Health{HealthUp, HealthUp}, healthOf(a)); diff != "" {
		t.Errorf("health after a round (-want +got):\n%s", diff)
	}
	want := map[string]reg{
		"chat":  {chat.URL, "m-chat", "openai", "openai"},
		"coder": {coder.URL, "m-coder", "openai", "openai"},
	}
	if diff := cmp.Diff(want, fr.snapshot()); diff != "" {
		t.Errorf("registrations (-want +got):\n%s", diff)
	}
}

func healthOf(a *Adopter) []Health {
	var out []Health
	for _, s := range a.Status() {
		out = append(out, s.Health)
	}
	return out
}
