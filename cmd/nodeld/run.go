package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/admin"
	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/demand"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/fleetui"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/meshproxy"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/table"
)

// Readiness conditions: /readyz says yes only when all hold.
const (
	readyAdmin = "admin listener"
	readyProxy = "proxy listeners"
	readyChain = "chain"
	readyMesh  = "mesh listener"
	// readyOperator is the operator socket: a script that waits for
	// readiness (or READY=1) and then runs nodeld ctl must reach it.
	readyOperator = "operator socket"
)

// chainSource is the chain source of the daemon's own lifecycle entries.
const chainSource = "nodeld"

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	cfgPath := fs.String("config", "", "config file (default "+defaultConfigPath+", else the embedded default)")
	chainReset := fs.Bool("chain-reset", false, "archive a broken audit chain and start a new one")
	// --test-* flags exist in a nodeld_testhooks build only (testhooks.go).
	test := testHookFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("usage: nodeld run [--config FILE] [--chain-reset]")
	}
	cfg, path, err := loadConfig(*cfgPath, *cfgPath == "")
	if err != nil {
		return err
	}
	return runDaemon(ctx, daemonOptions{
		cfg:        cfg,
		cfgPath:    path,
		chainReset: *chainReset,
		test:       test(),
		stderr:     stderr,
	})
}

// testFlags are the --test-* flags of nodeld run, registered only in a
// binary built with the nodeld_testhooks tag (testhooks.go): the shipped
// binary has none, so no operator can turn a test hook on.
type testFlags struct {
	// clockOffset (--test-clock-offset) shifts the clock of the
	// dispatcher and the host (workload.ctl and revocation notices,
	// signed and checked), so a fault test can skew one node in a network
	// namespace, which cannot have a clock of its own.
	clockOffset time.Duration
	// holdAfterPlace (--test-hold-after-place) and holdBeforePlace
	// (--test-hold-before-place) hold the controller on its place path
	// until the process is killed (tests of a controller killed there).
	holdAfterPlace, holdBeforePlace bool
}

type daemonOptions struct {
	cfg        *config.Config
	cfgPath    string // "" = embedded default
	chainReset bool
	// test are the --test-* flags of a nodeld_testhooks build; zero in
	// the shipped binary.
	test   testFlags
	stderr io.Writer
}

// runDaemon makes what every component shares (logger, data dir, node
// key, metrics registry, audit chain), builds the node on them, runs it
// until a signal or a failure, and closes the chain last.
func runDaemon(ctx context.Context, o daemonOptions) (err error) {
	cfg := o.cfg
	if err := checkComponents(cfg, configSource(o.cfgPath)); err != nil {
		return &exitError{code: 2, err: err}
	}
	lv, err := logLevel(cfg)
	if err != nil {
		return usageError("%v", err)
	}
	level := zap.NewAtomicLevelAt(lv)
	log := newLogger(cfg.Log.Format, level, o.stderr)
	defer func() { _ = log.Sync() }()

	if err := ensureDataDir(cfg.Node.DataDir, log); err != nil {
		return err
	}
	id, created, err := identity.LoadOrGenerate(identity.KeyPath(cfg.Node.DataDir))
	if err != nil {
		return err
	}
	if created {
		log.Info("generated node key", zap.String("path", identity.KeyPath(cfg.Node.DataDir)))
	}
	log = log.With(zap.String("node_id", id.ID()))
	// The nodes the workloads name, as config check resolves them.
	if err := checkNodeRefs(cfg, configSource(o.cfgPath), knownNodesIn(cfg.Node.DataDir)); err != nil {
		return &exitError{code: 2, err: err}
	}
	var now func() time.Time // nil: the components' default, time.Now
	if off := o.test.clockOffset; off != 0 {
		now = func() time.Time { return time.Now().Add(off) }
		log.Warn("test clock offset in force: workload.ctl calls are signed and checked with a shifted clock", zap.Duration("offset", off))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodeld_build_info",
		Help: "Build of the running nodeld; the value is always 1.",
	}, []string{"version", "goversion"})
	buildInfo.WithLabelValues(buildVersion(), buildGoVersion()).Set(1)
	reg.MustRegister(buildInfo)

	ch, err := openChain(filepath.Join(cfg.Node.DataDir, chainFileName), id, o.chainReset, reg, log)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := ch.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close chain: %w", cerr)
		}
	}()

	deps := nodeDeps{
		id: id, chain: ch, reg: reg, log: log, level: level, cfgPath: o.cfgPath, now: now,
		load: func() (*config.Config, error) { return reloadConfig(o.cfgPath) },
	}
	if o.test.holdAfterPlace {
		deps.hooks.place.After = func(ctx context.Context, _ string) error {
			log.Warn("test hook: holding after a place answer, before the controller records it")
			<-ctx.Done()
			return nil
		}
	}
	if o.test.holdBeforePlace {
		deps.hooks.place.Before = func(ctx context.Context) {
			log.Warn("test hook: holding before a place is sent, after the controller persisted its candidate")
			<-ctx.Done()
		}
	}
	n, err := newNode(cfg, deps)
	if err != nil {
		return err
	}
	start := map[string]any{
		"node_id": id.ID(), "name": cfg.Node.Name, "version": buildVersion(),
		"config": configSource(o.cfgPath), "pid": os.Getpid(),
	}
	if o.test.clockOffset != 0 {
		start["test_clock_offset"] = o.test.clockOffset.String()
	}
	if _, err := ch.Append(chainSource, "node.start", start); err != nil {
		return fmt.Errorf("chain node.start: %w", err)
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	runErr := n.run(ctx, hup)
	reason := "signal"
	if runErr != nil {
		reason = runErr.Error()
	}
	if _, err := ch.Append(chainSource, "node.stop", map[string]any{"reason": reason}); err != nil {
		log.Error("chain node.stop", zap.Error(err))
		if runErr == nil {
			runErr = fmt.Errorf("chain node.stop: %w", err)
		}
	}
	if runErr != nil {
		return runErr
	}
	log.Info("stopped")
	return nil
}

// nodeDeps are what a node is built on besides its config: what runDaemon
// makes first and closes last.
type nodeDeps struct {
	id      *identity.Identity
	chain   *chain.Chain
	reg     *prometheus.Registry
	log     *zap.Logger
	level   zap.AtomicLevel
	cfgPath string // "" = embedded default
	// load reads and validates the config again for a reload.
	load func() (*config.Config, error)
	// now is the clock of the dispatcher, the host, the facts source
	// (workload.ctl and revocation notices, signed and checked; facts
	// issued) and the controller; nil means time.Now. Only the test
	// clock offset (a nodeld_testhooks build) and tests (one fake clock
	// shared by in-process nodes) set it.
	now func() time.Time
	// hooks are the components' test hooks; the daemon sets none but
	// what a nodeld_testhooks build's --test-* flags ask for.
	hooks testHooks
}

// testHooks are the test hooks of the components, each in the shape
// its component takes it: only tests, and the --test-* flags of a
// nodeld_testhooks build (testhooks.go), set any.
type testHooks struct {
	// discover replaces runner.DefaultDiscoverCandidates (never the real
	// well-known ports); nil keeps them.
	discover []runner.DiscoverCandidate
	// probe replaces the facts probe's dependencies (a node that reports
	// another architecture or less free memory); nil probes this machine.
	probe *facts.ProbeDeps
	// host are the host's StopFault, ReplayWait and restart policy
	// (host.Deps).
	host hostHooks
	// place are the controller's dispatcher's hooks on the place path
	// (dispatch.ForControllerDeps.Hooks).
	place dispatch.PlaceHooks
	// manualTicks leaves the controller's loop unstarted: the test calls
	// the controller's Tick itself, on its fake clock.
	manualTicks bool
}

// node is the running daemon: its components, in the order newNode builds
// them, and what reload changes.
type node struct {
	id        *identity.Identity
	chain     *chain.Chain
	rec       *chain.Recorder // every record a remote party can trigger
	log       *zap.Logger
	level     zap.AtomicLevel
	cfgPath   string
	load      func() (*config.Config, error)
	discover  []runner.DiscoverCandidate // nil: the runner's defaults
	now       func() time.Time           // workload.ctl's clock; nil: time.Now
	started   time.Time
	reloadOK  prometheus.Gauge
	reloadSum *prometheus.CounterVec

	table     *table.Table
	mesh      *mesh.Mesh           // nil when mesh.listen is empty
	forwarder *meshproxy.Forwarder // nil without a mesh
	proxy     *proxy.Proxy
	adopter   *runner.Adopter
	facts     *facts.Source // the host signs them; a labels reload changes them
	host      *host.Host
	dispatch  *dispatch.Dispatcher
	ctrl      *plane.Controller // nil unless controller.enabled
	router    *operator.Router  // the operator socket's verbs
	operator  *operator.Server
	admin     *admin.Server

	// demand: standbys, the hold plug, the demand call (demandwire.go).
	demand    *demand.Node
	demandCtl *lateDemand

	mu      sync.Mutex // guards cfg, lastErr
	cfg     *config.Config
	lastErr string
}

// late binds the callbacks of components built early to the components
// they reach, which need the early ones to be built first: the table asks
// the mesh who is admitted and the proxy for its load; the mesh asks the
// host for its advertisement and hands it every new link. newNode sets
// each field as soon as its component exists, and every field is set
// before run starts anything, so no callback reaches a component that is
// not built.
type late struct {
	mesh  *mesh.Mesh // stays nil without a mesh: nobody is admitted
	proxy *proxy.Proxy
	host  *host.Host
}

var _ table.Admission = (*late)(nil)

func (l *late) IsAdmitted(nodeID string) bool { return l.mesh != nil && l.mesh.IsAdmitted(nodeID) }

func (l *late) load(role string) (int, int) { return l.proxy.Inflight(role) }

func (l *late) hostAdverts() []table.Advertisement {
	return []table.Advertisement{l.host.Advertisement(time.Now())}
}

func (l *late) replayNotices(ctx context.Context, p mesh.PeerInfo) { l.host.ReplayNotices(ctx, p) }

// newNode builds every component from cfg in dependency order: table,
// mesh, mesh forwarder, proxy, adopter, facts, host, dispatcher,
// controller (when enabled), operator socket, admin. Each validates its part; nothing is bound and no
// goroutine starts until run.
func newNode(cfg *config.Config, d nodeDeps) (*node, error) {
	n := &node{
		id: d.id, chain: d.chain, log: d.log, level: d.level, cfgPath: d.cfgPath,
		load: d.load, discover: d.hooks.discover, now: d.now, started: time.Now(), cfg: cfg,
	}
	n.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nodeld_config_last_reload_successful",
		Help: "Whether the last config load or reload succeeded (1) or was refused (0).",
	})
	n.reloadSum = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeld_config_reloads_total",
		Help: "Config reloads by result (ok, refused).",
	}, []string{"result"})
	if err := registerAll(d.reg, n.reloadOK, n.reloadSum); err != nil {
		return nil, err
	}
	n.reloadOK.Set(1)

	var err error
	n.rec, err = chain.NewRecorder(d.chain, chain.RecorderOptions{Logger: d.log.Named("chain"), Registerer: d.reg})
	if err != nil {
		return nil, err
	}
	l := &late{}
	n.table = table.New(d.id.ID(), table.Options{
		Admission: l,
		Audit:     d.chain,
		RecordRefusal: func(sender, kind, reason string, payload any) error {
			_, err := n.rec.Record(chain.RecordKey{Sender: sender, Kind: kind, Reason: reason}, table.AuditSource, payload)
			return err
		},
		Load: l.load,
	})
	if err := n.table.Register(d.reg); err != nil {
		return nil, err
	}
	adv := newDemandAdvertiser(n, d)
	if cfg.Mesh.Listen != "" {
		n.mesh, err = mesh.New(meshConfig(cfg), mesh.Deps{
			Identity:   d.id,
			DataDir:    cfg.Node.DataDir,
			Table:      adv,
			Audit:      d.chain,
			Recorder:   n.rec,
			Logger:     d.log.Named("mesh"),
			Registerer: d.reg,
			// A peer pinned on first contact gets an id: allowlists that
			// name it can now be applied, and the controller can describe
			// it.
			OnPeersChanged: n.peersChanged,
			// The workload-host advertisement goes to every peer.
			ExtraAdverts: l.hostAdverts,
			// A peer that joins or comes back gets the revocation notices
			// this node holds.
			OnLinkUp: l.replayNotices,
			// A peer that stopped (not restarted) is dead to the
			// controller at once.
			OnPeerStopped: n.peerStopped,
			// What happens to the links reaches the routes here, in
			// order, and only here: the table decides.
			PeerEvents: n.table.ApplyPeerEvent,
		})
		if err != nil {
			return nil, err
		}
		l.mesh = n.mesh
	}
	if n.demand, err = newDemand(n, cfg, d, adv); err != nil {
		return nil, err
	}

	act := activity.New(0, nil) // the fleet page's recent requests
	pdeps := proxy.Deps{
		Activity: act,
		// A role a controller can start for this node (its standby
		// advertisement) is held for, and asked for, on demand.
		Holds:      n.demand.Holds,
		Resolver:   n.table,
		Ports:      n.table,
		Logger:     d.log.Named("proxy"),
		Registerer: d.reg,
	}
	if n.mesh != nil {
		lim := forwarderLimits(cfg)
		n.forwarder, err = meshproxy.NewForwarder(meshproxy.Deps{
			Mesh: n.mesh, Table: n.table, Recorder: n.rec, Logger: d.log.Named("proxy.mesh"), Registerer: d.reg,
			MaxInflightPerPeer: lim.PerPeer, MaxInflightTotal: lim.Total, MaxBodyBytes: lim.MaxBody,
		})
		if err != nil {
			return nil, err
		}
		n.mesh.Handle(mesh.KindInfer, n.forwarder.ServeStream)
		pdeps.Remote = n.forwarder
	}
	n.proxy, err = proxy.New(proxyConfig(cfg), pdeps)
	if err != nil {
		return nil, err
	}
	l.proxy = n.proxy

	n.adopter, err = runner.NewAdopter(adopterConfig(cfg, d.hooks.discover), adoptedSlots{n.table}, d.log.Named("adopter"), d.reg)
	if err != nil {
		return nil, err
	}
	// One revocation list: the host enforces it, the operator edits it.
	rev, err := pkg.OpenRevocations(filepath.Join(cfg.Node.DataDir, pkg.RevocationsFile), time.Now)
	if err != nil {
		return nil, err
	}
	iso, err := newIsolator(cfg, d.id.ID())
	if err != nil {
		return nil, err
	}
	n.facts, err = newFacts(cfg, d.id, proxyPerf{n.proxy}, d.hooks.probe, d.now, iso.Support())
	if err != nil {
		return nil, err
	}
	n.host, err = newHost(cfg, d.id, n, d.chain, n.rec, rev, n.facts, d.reg, d.log, d.hooks.host, iso)
	if err != nil {
		return nil, err
	}
	l.host = n.host
	n.host.Register() // a no-op without a mesh
	ddeps := dispatch.Deps{
		Identity: d.id, Chain: d.chain, Logger: d.log.Named("dispatch"), Registerer: d.reg,
		Local: &localHost{n: n}, Revocations: rev,
		Notices: n.host, DataDir: cfg.Node.DataDir, Now: n.now,
		// One resolver for every node reference (config.ResolveNodeRef):
		// a node's own node.name names it here as in config check.
		ResolveNode: n.resolveRef,
	}
	if n.mesh != nil { // never a typed nil in the interface
		ddeps.Mesh = n.mesh
	}
	n.dispatch, err = dispatch.New(ddeps)
	if err != nil {
		return nil, err
	}
	n.dispatch.Register() // a no-op without a mesh
	var store *pkg.Store  // the controller's package store
	if cfg.Controller.Enabled {
		if n.ctrl, store, err = newController(n, cfg, d, rev); err != nil {
			return nil, err
		}
		n.bindDemand()
	}
	rdeps := operator.RouterDeps{
		Dispatcher: n.dispatch, NodeID: d.id.ID(), ResolveNode: n.resolveRef, PeerNames: n.peerNames,
		Logger: d.log.Named("controller"),
	}
	if d.chain != nil {
		rdeps.ChainPath = d.chain.Path()
	}
	if n.ctrl != nil { // never a typed nil in the interface
		rdeps.Controller, rdeps.Store = n.ctrl, store
	}
	if n.router, err = operator.NewRouter(rdeps); err != nil {
		return nil, err
	}
	n.operator, err = operator.NewServer(operator.Config{Path: cfg.SocketPath()},
		operator.Deps{Backend: n.router, Logger: d.log.Named("operator"), Registerer: d.reg,
			RefusePeer: iso.IsInstanceProcess})
	if err != nil {
		return nil, err
	}
	ui, err := fleetui.New(fleetui.Deps{Status: func() *operator.StatusDoc { return n.status().(*operator.StatusDoc) },
		Source: n.router, Activity: act, Logger: d.log.Named("fleetui"), Registerer: d.reg})
	if err != nil {
		return nil, err
	}
	n.admin, err = admin.New(adminConfig(cfg), admin.Deps{
		Gatherer: d.reg,
		Status:   n.status,
		UI:       ui.Handler(),
		Logger:   d.log.Named("admin"),
	})
	if err != nil {
		return nil, err
	}
	for _, c := range []string{readyAdmin, readyProxy, readyOperator} {
		n.admin.Require(c)
	}
	if n.mesh != nil {
		n.admin.Require(readyMesh)
	}
	// Not ready while appends fail; /readyz shows the chain's error.
	n.admin.Check(readyChain, d.chain.Healthy)
	n.table.ApplyPolicy(n.rolePolicies(cfg))
	return n, nil
}

// run starts every component in one errgroup and returns when they have
// all stopped: at ctx's end, or when one fails (which stops the others).
// Shutdown order: the proxy drains its clients' requests first (the
// instances and links they use stay up meanwhile), then everything else
// stops; the caller closes the chain after run returns.
//
// A stop that takes longer than stopWarnEvery is logged every
// stopWarnEvery with the components that have not returned yet, so that
// a stop that hangs (and that systemd ends with SIGKILL) says where.
func (n *node) run(ctx context.Context, hup <-chan os.Signal) error {
	g, gctx := errgroup.WithContext(ctx)
	rest, stopRest := context.WithCancel(context.WithoutCancel(gctx))
	defer stopRest()
	var left stillRunning
	start := func(name string, f func() error) {
		left.add(name)
		g.Go(func() error {
			defer left.done(name)
			return f()
		})
	}
	start("proxy", func() error {
		defer stopRest()
		return n.proxy.Run(gctx)
	})
	start("supervise", func() error { return n.supervise(gctx, hup) })
	for _, c := range n.components() {
		start(c.name, func() error { return c.Run(rest) })
	}
	stopped := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		left.watch(gctx, stopped, stopWarnEvery, n.log)
	}()
	err := g.Wait()
	close(stopped)
	<-watched
	if n.forwarder != nil {
		n.forwarder.CloseIdleConnections()
	}
	return err
}

// stopWarnEvery is how often a node that is stopping names the components
// it still waits for.
const stopWarnEvery = 5 * time.Second

// stillRunning is the names of run's components that have not returned.
type stillRunning struct {
	mu    sync.Mutex
	names []string // in start order
}

func (s *stillRunning) add(name string) {
	s.mu.Lock()
	s.names = append(s.names, name)
	s.mu.Unlock()
}

func (s *stillRunning) done(name string) {
	s.mu.Lock()
	if i := slices.Index(s.names, name); i >= 0 {
		s.names = slices.Delete(s.names, i, i+1)
	}
	s.mu.Unlock()
}

func (s *stillRunning) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.names)
}

// watch waits for ctx's end (the stop) and then, every every until
// stopped is closed, logs the components still running.
func (s *stillRunning) watch(ctx context.Context, stopped <-chan struct{}, every time.Duration, log *zap.Logger) {
	select {
	case <-ctx.Done():
	case <-stopped:
		return
	}
	began := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stopped:
			return
		case <-t.C:
		}
		log.Warn("still stopping", zap.Strings("waiting_for", s.list()), zap.Duration("after", time.Since(began)))
	}
}

// component is what run starts: Run owns its goroutines and returns nil
// once ctx ends.
type component interface {
	Run(ctx context.Context) error
}

// namedComponent is a component with the name a slow stop logs.
type namedComponent struct {
	component
	name string
}

// components are what run starts besides the proxy and supervise, which
// it orders itself.
func (n *node) components() []namedComponent {
	cs := []namedComponent{{n.admin, "admin"}, {n.adopter, "adopter"}, {n.operator, "operator"}, {n.host, "host"}, {n.rec, "recorder"}, {n.demand, "demand"}}
	if n.mesh != nil {
		cs = append(cs, namedComponent{n.mesh, "mesh"})
	}
	if n.ctrl != nil {
		cs = append(cs, namedComponent{n.ctrl, "controller"})
	}
	return cs
}

// supervise waits for readiness, tells systemd, pings its watchdog, and
// reloads on SIGHUP until ctx is done.
func (n *node) supervise(ctx context.Context, hup <-chan os.Signal) error {
	select {
	case <-n.admin.Bound():
		n.admin.SetReady(readyAdmin, true)
	case <-ctx.Done():
		return nil
	}
	select {
	case <-n.proxy.Ready():
		n.admin.SetReady(readyProxy, true)
	case <-ctx.Done():
		return nil
	}
	select {
	case <-n.operator.Ready():
		n.admin.SetReady(readyOperator, true)
	case <-ctx.Done():
		return nil
	}
	if n.mesh != nil {
		select {
		case <-n.mesh.Ready():
			n.admin.SetReady(readyMesh, true)
		case <-ctx.Done():
			return nil
		}
	}
	fields := []zap.Field{zap.Stringer("admin", n.admin.Addr())}
	if n.mesh != nil {
		fields = append(fields, zap.Stringer("mesh", n.mesh.Addr()))
	}
	n.log.Info("ready", fields...)
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		n.log.Warn("sd_notify ready", zap.Error(err))
	}

	var watchdog <-chan time.Time
	if interval, err := daemon.SdWatchdogEnabled(false); err == nil && interval > 0 {
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		watchdog = t.C
		n.log.Info("systemd watchdog enabled", zap.Duration("interval", interval))
	}
	defer func() {
		// Stopping: not ready any more while the proxy drains.
		n.admin.SetReady(readyProxy, false)
		_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			n.reload()
		case <-watchdog:
			// Listeners up, whatever a Check says: a chain that cannot be
			// written (a full disk) makes the node not ready, but a
			// restart would not bring the disk space back.
			if n.admin.RequiredMet() {
				_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}
	}
}

// openChain opens the audit chain (chain.OpenNode), archiving a broken
// one first when the operator asked for it, and tells an operator who did
// not how to.
func openChain(path string, id *identity.Identity, reset bool, reg prometheus.Registerer, log *zap.Logger) (*chain.Chain, error) {
	ch, err := chain.OpenNode(path, id.PrivateKey(), chainSource, reset, chain.Options{Logger: log.Named("chain"), Registerer: reg}, log)
	if errors.Is(err, chain.ErrBroken) {
		return nil, fmt.Errorf("%w; inspect it with nodeld chain verify %s, or start with --chain-reset to archive it and begin a new chain", err, path)
	}
	return ch, err
}

// config returns the config in force.
func (n *node) config() *config.Config {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cfg
}

// registerAll registers cs on reg, or reports the first that fails.
func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

// ensureDataDir makes the data directory with mode 0700, and tightens one
// that exists with any group or other permission to 0700, saying so: it
// holds the node key and the audit chain.
func ensureDataDir(dir string, log *zap.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	// Group search alone is host.isolation.users: the instances' shared
	// group reaches its package and scratch directories, nothing more.
	if perm := fi.Mode().Perm(); perm&0o067 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("data dir: tighten %s from %#o to 0700: %w", dir, perm, err)
		}
		log.Warn("tightened the data dir's mode to 0700", zap.String("path", dir), zap.String("was", fmt.Sprintf("%#o", perm)))
	}
	return nil
}

// Log encodings: the values of log.format other than auto.
const (
	logJSON    = "json"
	logConsole = "console"
)

// logEncoding is the encoding of log.format: json or console as forced,
// and for auto console on a terminal, json otherwise (a pipe, a file, the
// journal).
func logEncoding(format string, terminal bool) string {
	switch {
	case format == logJSON, format == logConsole:
		return format
	case terminal:
		return logConsole
	default:
		return logJSON
	}
}

// isTerminal reports whether w is a character device, as a terminal is.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func newLogger(format string, level zap.AtomicLevel, w io.Writer) *zap.Logger {
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if logEncoding(format, isTerminal(w)) == logConsole {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		// A person reads "5s", not 5; JSON keeps seconds as numbers.
		encCfg.EncodeDuration = zapcore.StringDurationEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), level), zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w))))
}

func configSource(path string) string {
	if path == "" {
		return "(embedded default)"
	}
	return path
}
