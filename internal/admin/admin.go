package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/reload"
)

// Limits of the admin server. Requests carry no bodies worth reading.
const (
	readHeaderTimeout = 5 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 16 << 10
	shutdownTimeout   = 5 * time.Second
)

// Config is the admin server's configuration.
type Config struct {
	// Listen is a loopback host:port; port 0 picks a free port.
	Listen string
	// Pprof serves Go's profiles under /debug/pprof/ (off: 404 there).
	// SetPprof changes it while the server runs.
	Pprof bool
}

// Deps are what the server reads from.
type Deps struct {
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// Status returns the /v1/status document; it must be cheap and safe
	// for concurrent use.
	Status func() any
	// UI serves the fleet page's routes under /ui/ (fleetui); nil serves
	// none. / redirects to /ui/ when it is set.
	UI     http.Handler
	Logger *zap.Logger
}

// Server is the admin HTTP server.
type Server struct {
	cfg  Config
	deps Deps
	log  *zap.Logger

	mu      sync.Mutex // guards pending, checks, addr
	pending map[string]bool
	checks  map[string]func() error
	addr    net.Addr

	bound chan struct{} // closed once the listener is bound
	pprof atomic.Bool   // /debug/pprof/ is served
}

// New validates cfg. It binds nothing.
func New(cfg Config, deps Deps) (*Server, error) {
	// The same rule as config's admin.listen: a loopback IP literal, so
	// what is bound is what was written.
	if _, err := grammar.ParseLoopbackAddrPort(cfg.Listen); err != nil {
		return nil, fmt.Errorf("admin listen %q: %w", cfg.Listen, err)
	}
	if deps.Gatherer == nil || deps.Status == nil {
		return nil, errors.New("admin: Gatherer and Status are required")
	}
	log := deps.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{cfg: cfg, deps: deps, log: log, pending: map[string]bool{}, checks: map[string]func() error{}, bound: make(chan struct{})}
	s.pprof.Store(cfg.Pprof)
	return s, nil
}

// SetPprof turns the /debug/pprof/ routes on or off (a config reload of
// admin.pprof); it applies to the next request.
func (s *Server) SetPprof(on bool) { s.pprof.Store(on) }

// ErrListenChanged is Prepare's refusal of a new listen address: the
// admin listener is bound once, at start.
var ErrListenChanged = errors.New("admin listen changes only with a restart")

// Prepare checks a reload's admin config (the same listen address) and
// returns the change that puts the rest in force, /debug/pprof/ on or off
// (the reload contract, internal/reload). It changes nothing itself.
func (s *Server) Prepare(cfg Config) (reload.Prepared, error) {
	if cfg.Listen != s.cfg.Listen {
		return nil, fmt.Errorf("admin listen %q -> %q: %w", s.cfg.Listen, cfg.Listen, ErrListenChanged)
	}
	return reload.Commit(func() { s.SetPprof(cfg.Pprof) }), nil
}

// Require adds a readiness condition that starts unmet. Call it before Run
// for every listener or resource that must be up before /readyz says yes.
func (s *Server) Require(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pending[name]; !ok {
		s.pending[name] = false
	}
}

// SetReady marks a readiness condition met or unmet.
func (s *Server) SetReady(name string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending[name] = ok
}

// Check adds a readiness condition that holds while check returns nil.
// Ready (and so /readyz) calls check each time and shows its error, so
// check must be cheap, must not block and must be safe for concurrent use
// (chain.Chain.Healthy is such a check).
func (s *Server) Check(name string, check func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = check
}

// Ready reports whether every condition is met, and the unmet ones: the
// name, followed for a failing Check by ": " and its error.
func (s *Server) Ready() (bool, []string) {
	s.mu.Lock()
	var unmet []string
	for name, ok := range s.pending {
		if !ok {
			unmet = append(unmet, name)
		}
	}
	checks := maps.Clone(s.checks)
	s.mu.Unlock()
	for name, check := range checks {
		if err := check(); err != nil {
			unmet = append(unmet, name+": "+err.Error())
		}
	}
	slices.Sort(unmet)
	return len(unmet) == 0, unmet
}

// RequiredMet reports whether every Require'd condition holds, leaving the
// Check conditions aside: the process is up and serving, even if a
// subsystem (the chain on a full disk) is degraded. The systemd watchdog
// follows it, so a degraded node is shown not ready but not restarted
// in a loop.
func (s *Server) RequiredMet() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ok := range s.pending {
		if !ok {
			return false
		}
	}
	return true
}

// Bound is closed once the listener is bound.
func (s *Server) Bound() <-chan struct{} { return s.bound }

// Addr returns the bound address, or nil before Run binds.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Handler returns the admin routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, unmet := s.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", unmet)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s.deps.Status()); err != nil {
			s.log.Warn("status encode", zap.Error(err))
		}
	})
	// Go's profiles, for operators (go tool pprof http://127.0.0.1:9464/debug/pprof/profile?seconds=20).
	// The handlers are net/http/pprof's, mounted here only: nodeld never
	// serves http.DefaultServeMux, where that package also registers them.
	if s.deps.UI != nil {
		mux.Handle("/ui/", s.deps.UI)
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/ui/", http.StatusFound)
		})
	}
	mux.HandleFunc("GET /debug/pprof/", s.gatePprof(pprof.Index))
	mux.HandleFunc("GET /debug/pprof/cmdline", s.gatePprof(pprof.Cmdline))
	mux.HandleFunc("GET /debug/pprof/profile", s.gatePprof(pprof.Profile))
	mux.HandleFunc("GET /debug/pprof/symbol", s.gatePprof(pprof.Symbol))
	mux.HandleFunc("GET /debug/pprof/trace", s.gatePprof(pprof.Trace))
	return loopbackOnly(mux)
}

// gatePprof answers 404, as for any unknown path, while admin.pprof is off.
func (s *Server) gatePprof(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.pprof.Load() {
			http.NotFound(w, r)
			return
		}
		h(w, r)
	}
}

// loopbackOnly applies the role ports' DNS-rebinding and cross-origin guard
// to every admin route: the status document names keys, peers, models and
// paths, and a web page must not read it through a name it rebinds to
// 127.0.0.1.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origins, present := r.Header["Origin"]
		if err := grammar.CheckLoopbackRequest(r.Host, origins, present); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Run binds the listener and serves until ctx is cancelled, then shuts
// down gracefully. It returns an error only when binding or serving fails.
func (s *Server) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("admin listen %s: %w", s.cfg.Listen, err)
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	close(s.bound)
	s.log.Info("admin listening", zap.Stringer("addr", ln.Addr()))

	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          zap.NewStdLog(s.log),
		// Requests end with ctx: a long one (the fleet page's event
		// stream, a profile) does not hold the shutdown up.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("admin serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin serve: %w", err)
	}
	return nil
}
