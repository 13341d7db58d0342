package proxy

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/holdq"
	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/table"
)

// Resolver says where a role is served right now; the placement table
// implements it. It is called once per request.
type Resolver interface {
	Resolve(role string) (table.Target, bool)
	// ResolveExcept resolves role without node among the remote
	// candidates: the next choice when a forward to node failed.
	ResolveExcept(role, node string) (table.Target, bool)
}

// PortRecorder learns the port each role's listener is bound to (port 0
// once the listener is gone), so in-process consumers can find it.
type PortRecorder interface {
	SetProxyPort(role string, port uint16)
}

// RemoteForwarder carries a request to the peer serving a role and writes
// the peer's response to w. It must return once ctx is done. An error
// returned before anything was written to w is answered as JSON (as is if
// it wraps an *Error, else 502); after that the client's stream is cut.
// It wraps ErrNotAnswered, ErrPeerNotServing and ErrPeerBusy (remote.go)
// where they apply, for the proxy to retry, hold or wait.
type RemoteForwarder interface {
	ForwardRemote(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter) error
}

// Deps are the proxy's collaborators.
type Deps struct {
	// Resolver is required.
	Resolver Resolver
	// Ports may be nil.
	Ports PortRecorder
	// Remote may be nil: then a role resolved to a peer answers 503 with
	// code mesh_not_running.
	Remote RemoteForwarder
	// Logger may be nil (no logs).
	Logger *zap.Logger
	// Registerer may be nil (metrics are kept but not exported).
	Registerer prometheus.Registerer
	// Holds may be nil: then only the built-in Holds (roles served here
	// lately) decide which requests are held. A Holds that is also a
	// ModelLister answers GET /v1/models for a role with no route.
	Holds Holds
	// Dial connects to local instances; nil means a TCP dial bounded by
	// the package's dial timeout. Tests give a dialer of in-memory
	// connections to a fake instance.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Activity, when set, is told of every forward as it ends.
	Activity *activity.Log
}

// ErrRunning is returned by a second call to Run.
var ErrRunning = errors.New("proxy: Run already called")

// Lifecycle states of a Proxy.
const (
	stateNew = iota
	stateRunning
	stateStopped
)

// Proxy is the set of per-role loopback listeners.
type Proxy struct {
	log       *zap.Logger
	resolver  Resolver
	ports     PortRecorder
	remote    RemoteForwarder
	metrics   *metrics
	pool      *httpfast.Pool // the local path
	errorLog  *log.Logger
	settings  atomic.Pointer[Config] // defaults applied; read per request
	ready     chan struct{}
	applyMu   sync.Mutex // serialises Run's start and ApplyConfig, held across binds and port reports
	mu        sync.Mutex // guards cfg, roles, state
	cfg       Config
	roles     map[string]*roleServer
	state     int
	wg        sync.WaitGroup // serve and drain goroutines; Run waits for them
	serveFail context.CancelCauseFunc

	// Holding requests (hold.go); holdq and recent are nil when the
	// Resolver's changes cannot be awaited: nothing is held then.
	holds         Holds
	activity      *activity.Log // nil: no activity kept
	models        ModelLister   // holds, when it lists a cold role's models
	holdq         *holdq.Queues
	recent        *holdq.Recent
	onHoldRelease func(role string, body []byte) // tests: a held request resolved again, in release order
}

// roleServer is one role's listener and its admission state.
type roleServer struct {
	name     string
	listen   string
	capacity atomic.Int64
	inflight atomic.Int64
	stopping atomic.Bool // set before the listener is closed on purpose
	handlers tracker
	ln       net.Listener // nil until bound
	gate     connGate     // bounds the connections ln accepts
	srv      *http.Server
	fast     *httpfast.Server // serves ln first, handing unusual connections to srv
	// Metric children resolved once, not per request.
	gauge prometheus.Gauge
	local routeMetrics
	peer  routeMetrics

	passthrough atomic.Bool // the role's ModelPassthrough

	lastBase atomic.Pointer[baseAddr] // the last local base and its address

	perf perfRecorder // the local instance's measured speed (perf.go)
}

// routeMetrics are one role's metric children for one route.
type routeMetrics struct {
	route    string
	duration prometheus.Observer
	ttfb     prometheus.Observer
	ok       prometheus.Counter // requests answered 200, the common case
}

func (m *metrics) forRoute(role, route string) routeMetrics {
	return routeMetrics{
		route:    route,
		duration: m.duration.WithLabelValues(role, route),
		ttfb:     m.ttfb.WithLabelValues(role, route),
		ok:       m.requests.WithLabelValues(role, route, "200"),
	}
}

// acquire takes an in-flight slot without waiting.
func (rs *roleServer) acquire() bool {
	for {
		n := rs.inflight.Load()
		if n >= rs.capacity.Load() {
			return false
		}
		if rs.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (rs *roleServer) release() { rs.inflight.Add(-1) }

// New validates cfg and builds a proxy; it binds nothing.
func New(cfg Config, deps Deps) (*Proxy, error) {
	if deps.Resolver == nil {
		return nil, errors.New("proxy: nil Resolver")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	full := cfg.withDefaults()
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	lg := deps.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	errorLog, err := zap.NewStdLogAt(lg.Named("http"), zap.DebugLevel)
	if err != nil {
		return nil, fmt.Errorf("proxy error log: %w", err)
	}
	p := &Proxy{
		log:      lg,
		resolver: deps.Resolver,
		ports:    deps.Ports,
		remote:   deps.Remote,
		metrics:  m,
		errorLog: errorLog,
		ready:    make(chan struct{}),
		cfg:      full,
		roles:    make(map[string]*roleServer, len(full.Roles)),
		pool:     httpfast.NewPool(deps.Dial),
		holds:    deps.Holds,
		activity: deps.Activity,
	}
	p.models, _ = deps.Holds.(ModelLister)
	p.newHolding(deps.Resolver)
	p.settings.Store(&full)
	for _, rc := range full.Roles {
		rs := newRoleServer(rc)
		rs.gate.max.Store(int64(full.MaxConnections))
		p.withMetrics(rs)
		p.roles[rc.Name] = rs
	}
	return p, nil
}

// newRoleServer builds a role's server without its metrics, so that a
// prepared reload that is aborted leaves no trace in them.
func newRoleServer(rc RoleConfig) *roleServer {
	rs := &roleServer{name: rc.Name, listen: rc.Listen}
	rs.gate.role = rc.Name
	rs.capacity.Store(int64(rc.Concurrency))
	rs.passthrough.Store(rc.ModelPassthrough)
	return rs
}

// withMetrics resolves a role server's metric children.
func (p *Proxy) withMetrics(rs *roleServer) {
	rs.gauge = p.metrics.inflight.WithLabelValues(rs.name)
	rs.local = p.metrics.forRoute(rs.name, routeLocal)
	rs.peer = p.metrics.forRoute(rs.name, routeRemote)
	rs.gate.log = p.log
	rs.gate.gauge = p.metrics.conns.WithLabelValues(rs.name)
	rs.gate.refused = p.metrics.refused.WithLabelValues(rs.name)
}

// Run binds one listener per role, serves until ctx is done, then drains
// in-flight requests (bounded by DrainTimeout, after which they are cut)
// and returns nil. It returns an error if a bind fails (nothing stays
// bound) or a listener fails while serving.
func (p *Proxy) Run(ctx context.Context) error {
	p.applyMu.Lock()
	p.mu.Lock()
	if p.state != stateNew {
		p.mu.Unlock()
		p.applyMu.Unlock()
		return ErrRunning
	}
	roles := make([]*roleServer, 0, len(p.roles))
	for _, rs := range p.roles {
		roles = append(roles, rs)
	}
	p.mu.Unlock()
	if err := bindAll(roles); err != nil {
		p.applyMu.Unlock()
		return err
	}
	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	p.mu.Lock()
	p.state = stateRunning
	p.serveFail = fail
	set := p.settings.Load()
	for _, rs := range roles {
		p.startLocked(rs, set)
	}
	p.mu.Unlock()
	p.reportPorts(roles, false)
	p.applyMu.Unlock()
	if w, ok := p.resolver.(holdq.Watcher); ok && p.holdq != nil {
		// Subscribed before the first look, so no change is missed.
		sub, unsubscribe := w.Subscribe()
		defer unsubscribe()
		p.wg.Go(func() { holdq.Watch(runCtx, sub, p.lookLive) })
	}
	close(p.ready)
	p.log.Info("proxy listening", zap.Int("roles", len(roles)))

	<-runCtx.Done()
	if p.holdq != nil {
		p.holdq.Stop() // held requests are answered now, not at the drain's end
	}

	p.applyMu.Lock()
	p.mu.Lock()
	p.state = stateStopped
	roles = roles[:0]
	for _, rs := range p.roles {
		roles = append(roles, rs)
		p.drainLocked(rs)
	}
	p.mu.Unlock()
	p.applyMu.Unlock()
	p.wg.Wait()
	p.reportPorts(roles, true)
	p.pool.Close()
	if err := context.Cause(runCtx); ctx.Err() == nil && err != nil {
		return err
	}
	return nil
}

// bindAll binds every role's listener, or none of them.
func bindAll(roles []*roleServer) error {
	for i, rs := range roles {
		ln, err := net.Listen("tcp", rs.listen)
		if err != nil {
			for _, done := range roles[:i] {
				_ = done.ln.Close() // never served; nothing to report
				done.ln = nil
			}
			return fmt.Errorf("proxy: bind role %q on %s: %w", rs.name, rs.listen, err)
		}
		rs.ln = ln
	}
	return nil
}

// startLocked serves a bound role. p.mu must be held.
func (p *Proxy) startLocked(rs *roleServer, set *Config) {
	rs.srv = &http.Server{
		Handler:                      &roleHandler{p: p, rs: rs},
		ReadHeaderTimeout:            set.HeaderTimeout,
		IdleTimeout:                  clientIdleTimeout,
		MaxHeaderBytes:               MaxHeaderBytes,
		ErrorLog:                     p.errorLog,
		DisableGeneralOptionsHandler: true,
	}
	srv, ln, fail := rs.srv, net.Listener(&gateListener{Listener: rs.ln, g: &rs.gate}), p.serveFail
	// The fast reader takes every connection first and hands the unusual
	// ones to srv (httpfast.Server).
	fs := httpfast.NewServer(rs.srv.Handler, ln.Addr(), set.HeaderTimeout, p.errorLog)
	rs.fast = fs
	p.wg.Go(func() { _ = srv.Serve(fs.Handoff()) }) // ends with ErrServerClosed at drain
	p.wg.Go(func() {
		if err := fs.Serve(ln); !errors.Is(err, http.ErrServerClosed) && !rs.stopping.Load() {
			fail(fmt.Errorf("proxy: serve role %q: %w", rs.name, err))
		}
	})
	p.log.Info("role listening", zap.String("role", rs.name), zap.Stringer("addr", rs.ln.Addr()))
}

// drainLocked closes a role's listener at once, so its port is free when
// this returns, and shuts its server down in the background: in-flight
// requests get DrainTimeout to finish and are then cut. p.mu must be held.
func (p *Proxy) drainLocked(rs *roleServer) {
	if rs.srv == nil {
		return
	}
	rs.stopping.Store(true)
	_ = rs.ln.Close() // Serve returns; its error is expected (stopping)
	srv, fs, timeout := rs.srv, rs.fast, p.settings.Load().DrainTimeout
	p.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if fs != nil && !fs.Shutdown(ctx) {
			p.log.Warn("role drain timed out, cutting requests", zap.String("role", rs.name))
		}
		// Shutdown's own listener close fails (already closed); only a
		// drain that ran out of time matters.
		if err := srv.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
			p.log.Warn("role drain timed out, cutting requests", zap.String("role", rs.name), zap.Error(err))
			_ = srv.Close() // the error is the listener's, already closed
		}
		// Close does not wait for handlers; their contexts are cancelled,
		// so they return promptly.
		if !rs.handlers.wait(timeout) {
			p.log.Error("role handlers still running after drain", zap.String("role", rs.name))
		}
	})
}

// reportPorts tells the PortRecorder about bound (or, when gone, released)
// listeners.
func (p *Proxy) reportPorts(roles []*roleServer, gone bool) {
	if p.ports == nil {
		return
	}
	for _, rs := range roles {
		if rs.ln == nil {
			continue
		}
		var port uint16
		if !gone {
			port = uint16(rs.ln.Addr().(*net.TCPAddr).Port)
		}
		p.ports.SetProxyPort(rs.name, port)
	}
}

// Ready is closed once every role's listener is bound.
func (p *Proxy) Ready() <-chan struct{} { return p.ready }

// Addr returns the bound address of a role's listener.
func (p *Proxy) Addr(role string) (net.Addr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rs, ok := p.roles[role]
	if !ok || rs.ln == nil || p.state != stateRunning {
		return nil, false
	}
	return rs.ln.Addr(), true
}

// Held returns how many requests are held for role right now.
func (p *Proxy) Held(role string) int { return p.holdq.Depth(role) }

// Inflight returns a role's requests in flight and its capacity (0, 0 for
// an unknown role).
func (p *Proxy) Inflight(role string) (inflight, capacity int) {
	p.mu.Lock()
	rs, ok := p.roles[role]
	p.mu.Unlock()
	if !ok {
		return 0, 0
	}
	return int(rs.inflight.Load()), int(rs.capacity.Load())
}

// ApplyConfig reloads the configuration: Prepare, then Commit. Limits and
// ModelPassthrough apply to new requests at once; concurrency changes apply to a role's
// next admission, MaxConnections to its next accepted connection. Added roles (and roles whose listen address changed) get
// new listeners and removed ones are drained. Binding is all or nothing:
// if any new listener cannot be bound, nothing changes and the error is
// returned. HeaderTimeout applies to listeners started after the reload.
func (p *Proxy) ApplyConfig(cfg Config) error {
	prep, err := p.Prepare(cfg)
	if err != nil {
		return err
	}
	prep.Commit()
	return nil
}

// Prepared is a configuration checked and bound but not yet in force: the
// listeners of its added roles are bound (so a port in use has already
// failed) and serve nothing. Exactly one of Commit and Abort must be
// called, once; until then the proxy's reload lock is held, so Run's start
// and stop, and other reloads, wait for it.
type Prepared struct {
	p       *Proxy
	full    Config
	next    map[string]*roleServer
	added   []*roleServer
	removed []*roleServer
	state   int
	done    bool
}

// Prepare checks cfg and binds the listeners of the roles it adds (all or
// none), changing nothing else: the old configuration stays in force until
// Commit. On error nothing is bound and nothing changed.
func (p *Proxy) Prepare(cfg Config) (*Prepared, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	full := cfg.withDefaults()
	p.applyMu.Lock()
	p.mu.Lock()
	state, old := p.state, p.roles
	p.mu.Unlock()
	if state == stateStopped {
		p.applyMu.Unlock()
		return nil, errors.New("proxy: stopped")
	}
	r := &Prepared{p: p, full: full, next: make(map[string]*roleServer, len(full.Roles)), state: state}
	for _, rc := range full.Roles {
		if rs, ok := old[rc.Name]; ok && rs.listen == rc.Listen {
			r.next[rc.Name] = rs
			continue
		}
		rs := newRoleServer(rc)
		r.next[rc.Name] = rs
		r.added = append(r.added, rs)
	}
	for name, rs := range old {
		if r.next[name] != rs {
			r.removed = append(r.removed, rs)
		}
	}
	if state == stateRunning {
		if err := bindAll(r.added); err != nil {
			p.applyMu.Unlock()
			return nil, err
		}
	}
	return r, nil
}

// Commit puts the prepared configuration in force: new limits and
// capacities, the added roles served, the removed ones drained.
func (r *Prepared) Commit() {
	if r.done {
		return
	}
	r.done = true
	p, full := r.p, r.full
	defer p.applyMu.Unlock()
	for _, rs := range r.added {
		p.withMetrics(rs)
	}
	for _, rc := range full.Roles {
		r.next[rc.Name].capacity.Store(int64(rc.Concurrency))
		r.next[rc.Name].passthrough.Store(rc.ModelPassthrough)
		r.next[rc.Name].gate.max.Store(int64(full.MaxConnections))
	}
	p.settings.Store(&full)
	p.mu.Lock()
	p.cfg, p.roles = full, r.next
	if r.state == stateRunning {
		for _, rs := range r.removed {
			p.drainLocked(rs)
		}
		for _, rs := range r.added {
			p.startLocked(rs, &full)
		}
	}
	p.mu.Unlock()
	if r.state == stateRunning {
		p.reportPorts(r.removed, true)
		p.reportPorts(r.added, false)
		p.log.Info("proxy config applied", zap.Int("added", len(r.added)), zap.Int("removed", len(r.removed)))
	}
}

// Abort closes the listeners Prepare bound; the old configuration stays
// in force, unchanged.
func (r *Prepared) Abort() {
	if r.done {
		return
	}
	r.done = true
	defer r.p.applyMu.Unlock()
	for _, rs := range r.added {
		if rs.ln != nil {
			_ = rs.ln.Close() // never served; nothing to report
			rs.ln = nil
		}
	}
}

// tracker counts running handlers so a drain can wait for them after
// http.Server.Close, which does not. A handler's add and done are one
// atomic add each; only the done that brings n to 0 takes the mutex, to
// wake a waiter.
type tracker struct {
	n    atomic.Int64  // running handlers
	mu   sync.Mutex    // guards zero
	zero chan struct{} // closed when n drops to 0 while someone waits
}

func (t *tracker) add() { t.n.Add(1) }

func (t *tracker) done() {
	if t.n.Add(-1) != 0 {
		return
	}
	t.mu.Lock()
	// n may have left 0 again since: a handler that started meanwhile
	// will close zero with its own done.
	if t.zero != nil && t.n.Load() == 0 {
		close(t.zero)
		t.zero = nil
	}
	t.mu.Unlock()
}

// wait returns true once no handler runs, false after timeout.
func (t *tracker) wait(timeout time.Duration) bool {
	if t.n.Load() == 0 {
		return true
	}
	t.mu.Lock()
	if t.zero == nil {
		t.zero = make(chan struct{})
	}
	zero := t.zero
	t.mu.Unlock()
	// A done that brought n to 0 before zero was set found none to
	// close: n says so now. One after it takes the mutex after zero was
	// set, and closes it.
	if t.n.Load() == 0 {
		return true
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-zero:
		return true
	case <-timer.C:
		return false
	}
}
