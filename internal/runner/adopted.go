package runner

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/reload"
)

// Registrar is where the Adopter puts the roles its instances serve: the
// placement table, registering them as adopted (cmd/nodeld adapts it).
// Every method, the LocalSlot's included, is called with the Adopter's lock
// held, so none may block on I/O or call back into the Adopter.
type Registrar interface {
	// RegisterLocal adds a registration of role served by the loopback
	// server at base and returns it. The role may have other
	// registrations (placed instances); the Registrar elects which serves.
	RegisterLocal(role, base, model, api, runtime string) (LocalSlot, error)
}

// LocalSlot is one registration the Adopter holds. The Adopter changes and
// withdraws only its own, so it never withdraws a role another writer (a
// placed instance) registered.
type LocalSlot interface {
	// Update replaces what the registration serves; on error it is
	// unchanged.
	Update(base, model, api, runtime string) error
	// Release withdraws the registration; releasing twice does nothing.
	Release()
	// Serving reports whether the registration is the one serving its role.
	Serving() bool
}

// AdoptedInstance is one model server nodeld probes but does not start
// (inference.instances in the config).
type AdoptedInstance struct {
	// Role is the role the server serves ("chat").
	Role string
	// Kind is the runtime, which decides how it is probed.
	Kind Kind
	// URL is http://<loopback ip or localhost>:<port>.
	URL string
	// Model is the model to serve; empty means discover it (see Probe).
	Model string
}

// AdopterConfig configures an Adopter.
type AdopterConfig struct {
	// Instances in config order; for a role served by several, the first
	// one that is up serves it.
	Instances []AdoptedInstance
	// Interval between probe rounds; zero means DefaultProbeInterval.
	Interval time.Duration
	// ProbeTimeout bounds one instance's probe; zero means
	// DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// MissLimit is how many probes in a row that get no answer (a timeout,
	// a connection reset) take an instance that is up down; zero means
	// DefaultMissLimit. An answer that it is not up (a refused connection,
	// a status other than 200, a model not listed) takes it down at once.
	MissLimit int
	// Discover, while Instances is empty, adopts for DiscoverRole the first
	// of DiscoverCandidates that answers like the runtime it is tried as
	// (see "Discovery" in the package documentation).
	Discover bool
	// DiscoverRole is the role a discovered server serves; required when
	// Discover is set.
	DiscoverRole string
	// DiscoverCandidates are the loopback servers discovery tries, in
	// order; nil means DefaultDiscoverCandidates.
	DiscoverCandidates []DiscoverCandidate
}

// DiscoverCandidate is a well-known loopback address of a model server and
// the runtime it is probed as there.
type DiscoverCandidate struct {
	Kind Kind
	URL  string
}

// DefaultDiscoverCandidates returns the usual local model servers on their
// default ports, in the order discovery tries them: Ollama (11434),
// llama.cpp's llama-server (8080), LM Studio (1234) and vLLM (8000), the
// last two as OpenAI-compatible servers.
func DefaultDiscoverCandidates() []DiscoverCandidate {
	return []DiscoverCandidate{
		{Kind: KindOllama, URL: "http://127.0.0.1:11434"},
		{Kind: KindLlamaCpp, URL: "http://127.0.0.1:8080"},
		{Kind: KindOpenAI, URL: "http://127.0.0.1:1234"},
		{Kind: KindOpenAI, URL: "http://127.0.0.1:8000"},
	}
}

// InstanceStatus is one instance as the Adopter last saw it.
type InstanceStatus struct {
	// Role, Kind and URL are as configured.
	Role, Kind, URL string
	// Model is the served model: the configured one, else the last one
	// discovered from the server, else "".
	Model string
	// Health is the last probe's finding (HealthUnknown before the first).
	Health Health
	// LastProbe is when the last probe finished (zero before the first).
	LastProbe time.Time
	// LastError says why the last probe was not up; "" when it was. With
	// Health up it is a missed probe (no answer) that the instance is
	// kept up through, fewer than MissLimit in a row.
	LastError string
	// Serving is true while this instance is the Adopter's registration
	// for Role and the Registrar elected it to serve the role (a placed
	// instance of the role serves before it).
	Serving bool
	// Discovered marks an instance found by discovery, not configured.
	Discovered bool
}

// ErrAlreadyRunning is returned by a second concurrent call to Run.
var ErrAlreadyRunning = errors.New("adopter already running")

// Adopter probes adopted model servers and keeps their roles registered
// while they are up. See the package documentation for its contract.
type Adopter struct {
	reg     Registrar
	log     *zap.Logger
	metrics *adopterMetrics
	now     func() time.Time
	// newTicker makes the round ticker; tests substitute a fake.
	newTicker func(time.Duration) ticker
	// afterRound, when set (tests), runs after every round Run completes.
	afterRound func()
	// reload carries ApplyConfig's "probe now" signal; size 1 so a signal
	// is never lost and ApplyConfig never blocks.
	reload  chan struct{}
	running atomic.Bool

	// mu guards the fields below. Registrar calls are made with mu held so
	// that a probe round and ApplyConfig cannot interleave registrations;
	// probes (network I/O) never run under mu.
	mu     sync.Mutex
	cfg    AdopterConfig
	client *http.Client
	// gen counts config swaps; a round whose snapshot is older than the
	// current config is discarded.
	gen    uint64
	states []instanceState
	// cands are the discovery candidates while discovery is on (Discover
	// and no configured instance), else nil.
	cands []candidate
	// serving maps a role to the Adopter's registration of it.
	serving map[string]registration
}

// instanceKey identifies an instance across config reloads.
type instanceKey struct {
	role  string
	kind  Kind
	base  string
	model string
}

// instanceState is one configured instance and its last probe.
type instanceState struct {
	inst      AdoptedInstance
	ep        endpoint
	health    Health
	model     string // last model served while up ("" if none learned)
	lastProbe time.Time
	lastErr   string
	// misses counts the probes in a row that got no answer while the
	// instance was kept up (always below the MissLimit).
	misses int
	// discovered is set for the instance discovery adopted; it is the only
	// state while it lasts, and is dropped once its probe finds it down.
	discovered bool
}

func (s *instanceState) key() instanceKey {
	return instanceKey{role: s.inst.Role, kind: s.inst.Kind, base: s.ep.base, model: s.inst.Model}
}

// registration is what the Adopter registered for a role, and its slot.
type registration struct {
	key   instanceKey
	model string
	slot  LocalSlot
}

// probeOutcome is one instance's result within a round.
type probeOutcome struct {
	res ProbeResult
	err error
	at  time.Time
}

// NewAdopter validates cfg (loopback-only URLs, known kinds, role tokens,
// model names, no role repeated at the same address, bounded counts and
// sane durations) and returns an Adopter that starts nothing until Run.
// registerer may be nil to leave the metrics unregistered.
func NewAdopter(cfg AdopterConfig, reg Registrar, log *zap.Logger, registerer prometheus.Registerer) (*Adopter, error) {
	if reg == nil {
		return nil, errors.New("new adopter: nil registrar")
	}
	cfg = cfg.withDefaults()
	eps, cands, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	m, err := newAdopterMetrics(registerer)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	a := &Adopter{
		reg:       reg,
		log:       log,
		metrics:   m,
		now:       time.Now,
		newTicker: newRealTicker,
		reload:    make(chan struct{}, 1),
		cfg:       cfg,
		client:    NewProbeClient(cfg.ProbeTimeout),
		serving:   make(map[string]registration),
	}
	a.cfg.Instances = slices.Clone(cfg.Instances)
	a.states = a.newStates(a.cfg, eps, nil)
	a.cands = discovering(cfg, cands)
	return a, nil
}

// discovering returns the candidates when discovery is on for cfg: Discover
// set and no instance configured.
func discovering(cfg AdopterConfig, cands []candidate) []candidate {
	if !cfg.Discover || len(cfg.Instances) > 0 {
		return nil
	}
	return cands
}

// newStates builds the state list for cfg, carrying over the last probe of
// instances that were already configured, and makes sure each instance's up
// gauge exists.
func (a *Adopter) newStates(cfg AdopterConfig, eps []endpoint, old []instanceState) []instanceState {
	prev := make(map[instanceKey]instanceState, len(old))
	for _, s := range old {
		prev[s.key()] = s
	}
	states := make([]instanceState, len(cfg.Instances))
	for i, inst := range cfg.Instances {
		s := instanceState{inst: inst, ep: eps[i], health: HealthUnknown}
		if p, ok := prev[s.key()]; ok {
			s = p
			s.inst = inst
			s.discovered = false // configured now
		}
		states[i] = s
		up := 0.0
		if s.health == HealthUp {
			up = 1
		}
		a.metrics.up.WithLabelValues(inst.Role, eps[i].hostPort).Set(up)
	}
	return states
}

// Run probes every instance at once, then every Interval and immediately
// after each ApplyConfig, registering and deregistering roles as instances
// come and go. When ctx is done it releases every registration it holds and
// returns nil. It returns ErrAlreadyRunning if Run is already running.
func (a *Adopter) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer a.running.Store(false)

	interval := a.interval()
	t := a.newTicker(interval)
	defer t.Stop()
	a.log.Info("adopter started", zap.Duration("interval", interval))
	for {
		a.round(ctx)
		if a.afterRound != nil {
			a.afterRound()
		}
		select {
		case <-ctx.Done():
			a.deregisterAll()
			a.log.Info("adopter stopped")
			return nil
		case <-t.Chan():
		case <-a.reload:
			if iv := a.interval(); iv != interval {
				interval = iv
				t.Reset(iv)
			}
		}
	}
}

func (a *Adopter) interval() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Interval
}

// ApplyConfig validates cfg and, only if it is valid, swaps the instance
// set: Prepare, then its commit. Instances that stay keep their last probe,
// roles whose registered instance is gone are deregistered before
// ApplyConfig returns, and a probe round is requested at once (without
// blocking). On error nothing changes.
func (a *Adopter) ApplyConfig(cfg AdopterConfig) error {
	p, err := a.Prepare(cfg)
	if err != nil {
		return err
	}
	p.Commit()
	return nil
}

// Prepare validates cfg (as Validate does) and returns the change that
// swaps it in as ApplyConfig does (the reload contract, internal/reload).
// Prepare changes nothing; the commit cannot fail.
func (a *Adopter) Prepare(cfg AdopterConfig) (reload.Prepared, error) {
	cfg = cfg.withDefaults()
	eps, cands, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	cfg.Instances = slices.Clone(cfg.Instances)
	cfg.DiscoverCandidates = slices.Clone(cfg.DiscoverCandidates)
	return reload.Commit(func() { a.applyConfig(cfg, eps, discovering(cfg, cands)) }), nil
}

// applyConfig swaps in a validated config.
func (a *Adopter) applyConfig(cfg AdopterConfig, eps []endpoint, cands []candidate) {
	a.mu.Lock()
	states := a.newStates(cfg, eps, a.states)
	// A discovered instance stays while discovery goes on for the same role
	// and still lists its address and runtime.
	for _, s := range a.states {
		if s.discovered && slices.ContainsFunc(cands, func(c candidate) bool { return c.inst == s.inst }) {
			states = append(states, s)
		}
	}
	kept := make(map[instanceKey]bool, len(states))
	labels := make(map[[2]string]bool, len(states))
	for _, s := range states {
		kept[s.key()] = true
		labels[[2]string{s.inst.Role, s.ep.hostPort}] = true
	}
	for _, s := range a.states {
		if !labels[[2]string{s.inst.Role, s.ep.hostPort}] {
			a.metrics.up.DeleteLabelValues(s.inst.Role, s.ep.hostPort)
		}
	}
	if cfg.ProbeTimeout != a.cfg.ProbeTimeout {
		a.client = NewProbeClient(cfg.ProbeTimeout)
	}
	a.states = states
	a.cands = cands
	a.cfg = cfg
	a.gen++
	for role, r := range a.serving {
		if !kept[r.key] {
			a.deregisterLocked(role, "instance no longer configured")
		}
	}
	a.mu.Unlock()

	select {
	case a.reload <- struct{}{}:
	default: // a round is already requested
	}
}

// Status returns every configured instance in config order, or the
// instance discovery adopted.
func (a *Adopter) Status() []InstanceStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]InstanceStatus, len(a.states))
	for i := range a.states {
		s := &a.states[i]
		model := s.model
		if model == "" {
			model = s.inst.Model
		}
		r, ok := a.serving[s.inst.Role]
		out[i] = InstanceStatus{
			Role:       s.inst.Role,
			Kind:       string(s.inst.Kind),
			URL:        s.inst.URL,
			Model:      model,
			Health:     s.health,
			LastProbe:  s.lastProbe,
			LastError:  s.lastErr,
			Serving:    ok && r.key == s.key() && r.slot.Serving(),
			Discovered: s.discovered,
		}
	}
	return out
}

// round probes every instance (at most maxConcurrentProbes at a time, each
// bounded by ProbeTimeout), and, while discovery is on and has found
// nothing, every discovery candidate, then applies the results. It returns
// once every probe has returned.
func (a *Adopter) round(ctx context.Context) {
	a.mu.Lock()
	gen, client, timeout := a.gen, a.client, a.cfg.ProbeTimeout
	insts := make([]AdoptedInstance, 0, len(a.states)+len(a.cands))
	for i := range a.states {
		insts = append(insts, a.states[i].inst)
	}
	var cands []candidate
	if len(a.states) == 0 {
		cands = a.cands
		for _, c := range cands {
			insts = append(insts, c.inst)
		}
	}
	a.mu.Unlock()

	outs := make([]probeOutcome, len(insts))
	sem := make(chan struct{}, maxConcurrentProbes)
	var wg sync.WaitGroup
	for i, inst := range insts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			res, err := Probe(pctx, client, inst)
			outs[i] = probeOutcome{res: res, err: err, at: a.now()}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // shutting down: the results may be cancellations, not findings
	}
	n := len(insts) - len(cands)
	a.apply(gen, outs[:n], cands, outs[n:])
}

// apply records a round's outcomes (outs for the states, candOuts for the
// discovery candidates probed) and brings the registrations in line.
func (a *Adopter) apply(gen uint64, outs []probeOutcome, cands []candidate, candOuts []probeOutcome) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if gen != a.gen {
		return // the config changed mid-round; ApplyConfig already asked for a new one
	}
	for i := range a.states {
		s, o := &a.states[i], outs[i]
		prev := s.health
		miss := o.err != nil && missed(o.err)
		result := string(o.res.Health)
		if miss {
			result = resultMissed
		}
		a.metrics.probes.WithLabelValues(s.inst.Role, result).Inc()
		s.lastProbe, s.lastErr = o.at, ""
		if o.err != nil {
			s.lastErr = o.err.Error()
		}
		if miss && prev == HealthUp && s.misses+1 < a.cfg.MissLimit {
			// No answer, but no answer that it is down either: a loaded
			// host (or server) is not a dead one. Kept up, and serving.
			s.misses++
			a.log.Warn("instance probe missed, kept up",
				zap.String("role", s.inst.Role),
				zap.String("runtime", string(s.inst.Kind)),
				zap.String("url", s.ep.base),
				zap.Int("misses", s.misses),
				zap.Int("miss_limit", a.cfg.MissLimit),
				zap.String("reason", s.lastErr))
			continue
		}
		s.misses = 0
		s.health = o.res.Health
		up := 0.0
		if s.health == HealthUp {
			s.model = o.res.Model
			up = 1
		}
		a.metrics.up.WithLabelValues(s.inst.Role, s.ep.hostPort).Set(up)
		if prev != s.health {
			a.log.Info("instance health changed",
				zap.String("role", s.inst.Role),
				zap.String("runtime", string(s.inst.Kind)),
				zap.String("url", s.ep.base),
				zap.String("from", string(prev)),
				zap.String("to", string(s.health)),
				zap.String("reason", s.lastErr))
		}
	}
	a.dropGoneLocked()
	a.discoverLocked(cands, candOuts)
	a.syncRolesLocked()
}

// dropGoneLocked drops a discovered instance its last probe found down, so
// the next round discovers again. mu must be held.
func (a *Adopter) dropGoneLocked() {
	a.states = slices.DeleteFunc(a.states, func(s instanceState) bool {
		if !s.discovered || s.health != HealthDown {
			return false
		}
		a.metrics.up.DeleteLabelValues(s.inst.Role, s.ep.hostPort)
		a.log.Info("discovered model server gone",
			zap.String("role", s.inst.Role),
			zap.String("runtime", string(s.inst.Kind)),
			zap.String("url", s.ep.base),
			zap.String("reason", s.lastErr))
		return true
	})
}

// discoverLocked adopts the first candidate, in order, that answers like
// the runtime it was probed as: its probe is up and it names a model
// (Ollama: lists at least one, which its probe already requires). A server
// that answers a health path but names no model is some other service on
// that port. mu must be held.
func (a *Adopter) discoverLocked(cands []candidate, outs []probeOutcome) {
	if len(a.states) > 0 || len(a.cands) == 0 {
		return
	}
	for i, c := range cands {
		o := outs[i]
		if o.res.Health != HealthUp || (o.res.Model == "" && c.inst.Kind != KindOllama) {
			continue
		}
		a.states = append(a.states, instanceState{
			inst: c.inst, ep: c.ep, health: HealthUp, model: o.res.Model,
			lastProbe: o.at, discovered: true,
		})
		a.metrics.up.WithLabelValues(c.inst.Role, c.ep.hostPort).Set(1)
		a.metrics.probes.WithLabelValues(c.inst.Role, string(HealthUp)).Inc()
		a.log.Info("discovered model server",
			zap.String("role", c.inst.Role),
			zap.String("runtime", string(c.inst.Kind)),
			zap.String("url", c.ep.base),
			zap.String("model", o.res.Model))
		return
	}
}

// syncRolesLocked keeps one registration per configured role on the first
// instance in config order that is up (updating the registration it holds
// when that instance changes), and releases its registration of roles with
// none up. mu must be held.
func (a *Adopter) syncRolesLocked() {
	first := make(map[string]int)
	var roles []string
	for i := range a.states {
		role := a.states[i].inst.Role
		if _, seen := first[role]; !seen {
			first[role] = -1
			roles = append(roles, role)
		}
		if first[role] == -1 && a.states[i].health == HealthUp {
			first[role] = i
		}
	}
	for role := range a.serving {
		if _, ok := first[role]; !ok {
			// A discovered server that went away, as often as a
			// configured one that was removed.
			a.deregisterLocked(role, "no configured or discovered instance left for the role")
		}
	}
	for _, role := range roles {
		i := first[role]
		cur, had := a.serving[role]
		if i < 0 {
			if had {
				a.deregisterLocked(role, "no instance up")
			}
			continue
		}
		s := &a.states[i]
		want := registration{key: s.key(), model: s.model}
		if had && cur.key == want.key && cur.model == want.model {
			continue
		}
		var err error
		if had {
			// The Adopter's own registration moves to the new instance;
			// it is never withdrawn on the way.
			want.slot = cur.slot
			err = cur.slot.Update(s.ep.base, s.model, APIOpenAI, string(s.inst.Kind))
		} else {
			want.slot, err = a.reg.RegisterLocal(role, s.ep.base, s.model, APIOpenAI, string(s.inst.Kind))
		}
		if err != nil {
			a.log.Warn("role registration refused", zap.String("role", role), zap.String("url", s.ep.base), zap.Error(err))
			if had {
				a.deregisterLocked(role, "registration refused")
			}
			continue
		}
		a.serving[role] = want
		a.log.Info("role registered",
			zap.String("role", role),
			zap.String("url", s.ep.base),
			zap.String("model", s.model),
			zap.String("runtime", string(s.inst.Kind)))
	}
}

// deregisterLocked releases the Adopter's registration of role, and only
// it: a placed instance of the role keeps serving. mu must be held.
func (a *Adopter) deregisterLocked(role, reason string) {
	a.serving[role].slot.Release()
	delete(a.serving, role)
	a.log.Info("role deregistered", zap.String("role", role), zap.String("reason", reason))
}

// deregisterAll withdraws every role the Adopter registered (shutdown).
func (a *Adopter) deregisterAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for role := range a.serving {
		a.deregisterLocked(role, "shutdown")
	}
}

// ticker is the part of time.Ticker Run uses, so tests can drive rounds.
type ticker interface {
	Chan() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

type realTicker struct{ *time.Ticker }

func newRealTicker(d time.Duration) ticker { return realTicker{time.NewTicker(d)} }

func (t realTicker) Chan() <-chan time.Time { return t.C }
