package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/admin"
	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctlforward"
	"github.com/nodeld/nodeld/internal/ctlraft"
	"github.com/nodeld/nodeld/internal/demand"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/fleetui"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/lifecycle"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/meshproxy"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/table"
)

// Readiness conditions: /readyz says yes only when all hold. The operator
// socket is one: a script that waits for readiness (or READY=1) and then
// runs nodeld ctl must reach it.
const (
	readyAdmin    = "admin listener"
	readyProxy    = "proxy listeners"
	readyChain    = "chain"
	readyMesh     = "mesh listener"
	readyOperator = "operator socket"
)

// runDaemon makes what every component shares (logger, data dir, node
// key, metrics registry, audit chain), builds the node on them, runs it
// until a signal or a failure, and closes the chain last.
func runDaemon(ctx context.Context, o daemonOptions) (err error) {
	cfg, src := o.cfg, configSource(o.cfgPath)
	if err := checkComponents(cfg, src); err != nil {
		return &exitError{code: 2, err: err}
	}
	lv, err := lifecycle.ParseLevel(cfg.Log.Level)
	if err != nil {
		return usageError("%v", err)
	}
	level := zap.NewAtomicLevelAt(lv)
	log := lifecycle.NewLogger(cfg.Log.Format, level, o.stderr)
	defer func() { _ = log.Sync() }()
	if err := lifecycle.EnsureDataDir(cfg.Node.DataDir, log); err != nil {
		return err
	}
	keyPath := identity.KeyPath(cfg.Node.DataDir)
	id, created, err := identity.LoadOrGenerate(keyPath)
	if err != nil {
		return err
	}
	if created {
		log.Info("generated node key", zap.String("path", keyPath))
	}
	log = log.With(zap.String("node_id", id.ID()))
	// The nodes the workloads name, as config check resolves them.
	if err := config.CheckNodeRefsFile(cfg, src, mesh.KnownNodesIn(cfg.Node.DataDir)); err != nil {
		return &exitError{code: 2, err: err}
	}
	reg := lifecycle.NewRegistry(buildVersion(), buildGoVersion())
	ch, err := lifecycle.OpenChain(filepath.Join(cfg.Node.DataDir, chainFileName), id, o.chainReset, reg, log)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := ch.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close chain: %w", cerr)
		}
	}()
	deps := nodeDeps{id: id, chain: ch, reg: reg, log: log, level: level, cfgPath: o.cfgPath,
		load: func() (*config.Config, error) { return reloadConfig(o.cfgPath) }}
	start := map[string]any{"node_id": id.ID(), "name": cfg.Node.Name, "version": buildVersion(), "config": src, "pid": os.Getpid()}
	o.test.apply(&deps, start)
	n, err := newNode(cfg, deps)
	if err != nil {
		return err
	}
	return lifecycle.Serve(ctx, ch, log, start, n.run)
}

// nodeDeps are what a node is built on besides its config: what runDaemon
// makes first and closes last.
type nodeDeps struct {
	id      *identity.Identity
	chain   *chain.Chain
	reg     *prometheus.Registry
	log     *zap.Logger
	level   zap.AtomicLevel
	cfgPath string                         // "" = embedded default
	load    func() (*config.Config, error) // reads and validates the config for a reload
	// now is the clock of the dispatcher, the host, the facts and the
	// controller; nil means time.Now. Only the test clock offset and
	// tests (one fake clock shared by in-process nodes) set it.
	now   func() time.Time
	hooks testHooks
}

// testHooks are the components' test hooks, each in the shape its
// component takes it: only tests, and the --test-* flags of a
// nodeld_testhooks build (testhooks.go), set any.
type testHooks struct {
	discover               []runner.DiscoverCandidate // replaces the well-known candidates
	probe                  *facts.ProbeDeps           // replaces the facts probe's machine
	host                   hostHooks
	place                  dispatch.PlaceHooks // the controller's place path
	manualTicks, stateFile bool                // the test ticks the controller; it keeps controller.json (before raft)
	raft                   ctlraft.Deps        // Tune and FirstBootWait of the controller's raft
}

// hostHooks are host.Deps' StopFault and ReplayWait and the host's
// restart policy.
type hostHooks struct {
	stopFault  func(instanceID string) error
	replayWait func(ctx context.Context, peerID string, sent int) error
	restart    runner.RestartPolicy
}

// node is the running daemon: its components, in the order newNode builds
// them, and the config in force.
type node struct {
	id       *identity.Identity
	chain    *chain.Chain
	rec      *chain.Recorder // every record a remote party can trigger
	log      *zap.Logger
	level    zap.AtomicLevel
	cfgPath  string
	discover []runner.DiscoverCandidate // nil: the runner's defaults
	started  time.Time
	reloader *lifecycle.Reloader

	table     *table.Table
	mesh      *mesh.Mesh           // nil when mesh.listen is empty
	refs      mesh.NodeRefs        // the one resolver of node references
	forwarder *meshproxy.Forwarder // nil without a mesh
	demand    *demand.Node         // standbys, the hold plug, the demand call
	demandCtl *demand.Deferred     // the controller, to the demand side
	proxy     *proxy.Proxy
	adopter   *runner.Adopter
	facts     *facts.Source
	host      *host.Host
	dispatch  *dispatch.Dispatcher
	ctrl      *plane.Controller // nil unless controller.enabled
	raft      *ctlraft.Store    // the controller's state in raft
	router    *operator.Router  // the operator socket's verbs
	operator  *operator.Server
	admin     *admin.Server

	mu  sync.Mutex // guards cfg
	cfg *config.Config
}

// newNode builds every component from cfg in dependency order: table,
// mesh, demand, forwarder, proxy, adopter, facts, host, dispatcher,
// controller (when enabled), operator socket, admin. Each validates its
// part; nothing is bound and no goroutine starts until run. A component
// built early reaches one built later (the table the mesh and the proxy,
// the mesh the host) through a func value that run never calls before
// newNode has returned.
func newNode(cfg *config.Config, d nodeDeps) (*node, error) {
	n := &node{id: d.id, chain: d.chain, log: d.log, level: d.level, cfgPath: d.cfgPath,
		discover: d.hooks.discover, started: time.Now(), cfg: cfg, demandCtl: &demand.Deferred{}}
	src := configSource(d.cfgPath)
	var err error
	if n.reloader, err = lifecycle.NewReloader(lifecycle.ReloaderConfig{Source: src, Load: d.load, Current: n.config,
		Steps: n.reloadSteps, Chain: d.chain, Log: d.log, Registerer: d.reg,
		Check: func(next *config.Config) error {
			if err := checkComponents(next, src); err != nil {
				return err
			}
			return config.CheckNodeRefsFile(next, src, n.refs.Known())
		}}); err != nil {
		return nil, err
	}
	if n.rec, err = chain.NewRecorder(d.chain, chain.RecorderOptions{Logger: d.log.Named("chain"), Registerer: d.reg}); err != nil {
		return nil, err
	}
	n.table = table.New(d.id.ID(), table.Options{
		Admission: table.AdmitFunc(func(id string) bool { return n.mesh != nil && n.mesh.IsAdmitted(id) }),
		Audit:     d.chain,
		RecordRefusal: func(sender, kind, reason string, payload any) error {
			_, err := n.rec.Record(chain.RecordKey{Sender: sender, Kind: kind, Reason: reason}, table.AuditSource, payload)
			return err
		},
		Load: func(role string) (int, int) { return n.proxy.Inflight(role) },
	})
	if err := n.table.Register(d.reg); err != nil {
		return nil, err
	}
	// The mesh's advertisements: the table's, plus the standbys of the
	// controller's on-demand workloads, each only to its demand_from.
	adv := demand.NewAdvertiser(n.table, n.demandCtl, d.id.ID())
	if cfg.Mesh.Listen != "" {
		if n.mesh, err = mesh.New(mesh.FromConfig(cfg), mesh.Deps{
			Identity: d.id, DataDir: cfg.Node.DataDir, Table: adv, Audit: d.chain, Recorder: n.rec,
			Logger: d.log.Named("mesh"), Registerer: d.reg,
			// A peer pinned on first contact gets an id: the allowlists
			// and the controller's targets are resolved again.
			OnPeersChanged: n.peersChanged,
			ExtraAdverts:   func() []table.Advertisement { return []table.Advertisement{n.host.Advertisement(time.Now())} },
			// A peer that joins or comes back gets the revocation notices
			// this node holds.
			OnLinkUp: func(ctx context.Context, p mesh.PeerInfo) { n.host.ReplayNotices(ctx, p) },
			// A peer that stopped (not restarted) is dead to the controller
			// at once.
			OnPeerStopped: func(peer string) {
				if n.ctrl != nil {
					n.ctrl.PeerStopped(peer)
				}
			},
			// What happens to the links reaches the routes here, in order,
			// and only here: the table decides.
			PeerEvents: func(ev table.PeerEvent) { n.table.ApplyPeerEvent(ev); n.forwarder.PeerEvent(ev) },
		}); err != nil {
			return nil, err
		}
	}
	n.refs = mesh.NodeRefs{Self: d.id.ID(), Mesh: n.mesh, Config: n.config}
	ddeps := demand.Deps{Key: d.id.PrivateKey(), Table: n.table, Recorder: n.rec, Logger: d.log.Named("demand"), Registerer: d.reg, Now: d.now}
	if n.mesh != nil { // never a typed nil in the interface
		ddeps.Mesh = n.mesh
	}
	if cfg.Controller.Enabled {
		ddeps.Controller, ddeps.Advertiser = n.demandCtl, adv
	}
	if n.demand, err = demand.New(ddeps); err != nil {
		return nil, err
	}
	// A role a controller can start for this node (its standby
	// advertisement) is held for, and asked for, on demand; the fleet
	// page shows each forward's outcome (act).
	act := activity.New(0, nil)
	pdeps := proxy.Deps{Holds: n.demand.Holds, Resolver: n.table, Ports: n.table, Activity: act, Logger: d.log.Named("proxy"), Registerer: d.reg}
	if n.mesh != nil {
		if n.demand.Server != nil {
			n.mesh.Handle(mesh.KindDemand, n.demand.Server.ServeStream)
		}
		lim := meshproxy.LimitsFromConfig(cfg)
		if n.forwarder, err = meshproxy.NewForwarder(meshproxy.Deps{
			Mesh: n.mesh, Table: n.table, Recorder: n.rec, Logger: d.log.Named("proxy.mesh"), Registerer: d.reg,
			MaxInflightPerPeer: lim.PerPeer, MaxInflightTotal: lim.Total, MaxBodyBytes: lim.MaxBody, TCP: meshproxy.TCPFromConfig(cfg), Identity: d.id,
		}); err != nil {
			return nil, err
		}
		n.mesh.Handle(mesh.KindInfer, n.forwarder.ServeStream)
		pdeps.Remote = n.forwarder
	}
	if n.proxy, err = proxy.New(proxy.FromConfig(cfg), pdeps); err != nil {
		return nil, err
	}
	ac := runner.AdopterFromConfig(cfg, d.hooks.discover)
	if n.adopter, err = runner.NewAdopter(ac, adoptedSlots{n.table}, d.log.Named("adopter"), d.reg); err != nil {
		return nil, err
	}
	// One revocation list: the host enforces it, the operator edits it.
	rev, err := pkg.OpenRevocations(filepath.Join(cfg.Node.DataDir, pkg.RevocationsFile), time.Now)
	if err != nil {
		return nil, err
	}
	iso, err := host.NewIsolator(cfg, d.id.ID())
	if err != nil {
		return nil, err
	}
	if n.facts, err = facts.FromConfig(cfg, d.id.PrivateKey(), facts.FromConfigOptions{
		Perf: proxyPerf{n.proxy}, Probe: d.hooks.probe, Now: d.now, Isolation: iso.Support()}); err != nil {
		return nil, err
	}
	if n.host, err = newHost(n, cfg, d, rev, iso); err != nil {
		return nil, err
	}
	n.host.Register() // a no-op without a mesh
	ddis := dispatch.Deps{Identity: d.id, Chain: d.chain, Logger: d.log.Named("dispatch"), Registerer: d.reg,
		Local: host.Self{Host: n.host, Log: d.log.Named("host"), Artifacts: func(ctx context.Context, peer string, rw io.ReadWriter) error {
			return n.dispatch.ServeArtifact(ctx, peer, rw)
		}},
		Revocations: rev, Notices: n.host, DataDir: cfg.Node.DataDir, Now: d.now, ResolveNode: n.refs.Resolve}
	if n.mesh != nil { // never a typed nil in the interface
		ddis.Mesh = n.mesh
	}
	if n.dispatch, err = dispatch.New(ddis); err != nil {
		return nil, err
	}
	n.dispatch.Register() // a no-op without a mesh
	fwd, err := ctlforward.NewFromConfig(cfg, d.id.ID(), n.mesh, ctlforward.Deps{Logger: d.log, Registerer: d.reg, Backend: func() ctlforward.Backend { return n.router }})
	if err != nil {
		return nil, err
	}
	rdeps := operator.RouterDeps{Dispatcher: n.dispatch, NodeID: d.id.ID(), ResolveNode: n.refs.Resolve,
		PeerNames: n.refs.PeerNames, Logger: d.log.Named("controller"), ChainPath: d.chain.Path(), Forwarder: fwd}
	if cfg.Controller.Enabled {
		store := pkg.NewStore(filepath.Join(cfg.Node.DataDir, pkg.StoreDir), rev)
		if n.ctrl, err = newController(n, cfg, d, rev, store); err != nil {
			return nil, err
		}
		n.demandCtl.Bind(plane.NewDemandSide(n.ctrl))
		rdeps.Controller, rdeps.Store = n.ctrl, store
	}
	if n.router, err = operator.NewRouter(rdeps); err != nil {
		return nil, err
	}
	if n.operator, err = operator.NewServer(operator.Config{Path: cfg.SocketPath()}, operator.Deps{Backend: n.router,
		Logger: d.log.Named("operator"), Registerer: d.reg, RefusePeer: iso.IsInstanceProcess}); err != nil {
		return nil, err
	}
	ui, err := fleetui.New(fleetui.Deps{Status: func() *operator.StatusDoc { return n.status().(*operator.StatusDoc) },
		Source: n.router, Activity: act, Logger: d.log.Named("fleetui"), Registerer: d.reg})
	if err != nil {
		return nil, err
	}
	if n.admin, err = admin.New(admin.FromConfig(cfg), admin.Deps{Gatherer: d.reg, Status: n.status, UI: ui.Handler(), Logger: d.log.Named("admin")}); err != nil {
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
	n.applyRolePolicy()
	return n, nil
}

// run starts every component (lifecycle.Group) and returns when they have
// all stopped: at ctx's end, or when one fails (which stops the others).
// Shutdown order: the proxy drains its clients' requests first (the
// instances and links they use stay up meanwhile), then everything else
// stops; the caller closes the chain after run returns.
func (n *node) run(ctx context.Context, hup <-chan os.Signal) error {
	first := []lifecycle.Component{{Name: "proxy", Run: n.proxy.Run},
		{Name: "supervise", Run: func(ctx context.Context) error { return n.supervise(ctx, hup) }}}
	rest := []lifecycle.Component{{Name: "admin", Run: n.admin.Run}, {Name: "adopter", Run: n.adopter.Run},
		{Name: "operator", Run: n.operator.Run}, {Name: "host", Run: n.host.Run}, {Name: "recorder", Run: n.rec.Run},
		{Name: "demand", Run: n.demand.Run}}
	if n.mesh != nil {
		rest = append(rest, lifecycle.Component{Name: "mesh", Run: n.mesh.Run}, lifecycle.Component{Name: "mesh tcp", Run: n.forwarder.Run})
	}
	if n.ctrl != nil {
		rest = append(rest, lifecycle.Component{Name: "controller", Run: n.ctrl.Run})
	}
	if n.raft != nil { // the controller's state in raft
		rest = append(rest, lifecycle.Component{Name: "raft", Run: n.raft.Run})
	}
	err := lifecycle.Group{Log: n.log}.Run(ctx, first, rest)
	if n.forwarder != nil {
		n.forwarder.CloseIdleConnections()
	}
	return err
}

// supervise waits for readiness, tells systemd, pings its watchdog, and
// reloads on SIGHUP until ctx is done (lifecycle.Supervisor).
func (n *node) supervise(ctx context.Context, hup <-chan os.Signal) error {
	conds := []lifecycle.Condition{{Name: readyAdmin, Ready: n.admin.Bound()}, {Name: readyProxy, Ready: n.proxy.Ready()},
		{Name: readyOperator, Ready: n.operator.Ready()}}
	if n.mesh != nil {
		conds = append(conds, lifecycle.Condition{Name: readyMesh, Ready: n.mesh.Ready()})
	}
	s := &lifecycle.Supervisor{Conditions: conds, SetReady: n.admin.SetReady, Draining: readyProxy, Alive: n.admin.RequiredMet,
		Reload: func() { _ = n.reloader.Reload() }, Log: n.log, ReadyFields: func() []zap.Field {
			fields := []zap.Field{zap.Stringer("admin", n.admin.Addr())}
			if n.mesh != nil {
				fields = append(fields, zap.Stringer("mesh", n.mesh.Addr()))
			}
			return fields
		}}
	return s.Run(ctx, hup)
}

// config returns the config in force.
func (n *node) config() *config.Config {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cfg
}
