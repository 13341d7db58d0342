package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/nodeld/nodeld/internal/admin"
	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/pkg"
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
)

// chainSource is the chain source of the daemon's own lifecycle entries.
const chainSource = "nodeld"

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	cfgPath := fs.String("config", "", "config file (default "+defaultConfigPath+", else the embedded default)")
	chainReset := fs.Bool("chain-reset", false, "archive a broken audit chain and start a new one")
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
		stderr:     stderr,
	})
}

type daemonOptions struct {
	cfg        *config.Config
	cfgPath    string // "" = embedded default
	chainReset bool
	stderr     io.Writer
}

// node is the running daemon: the components and what reload changes.
type node struct {
	id        *identity.Identity
	chain     *chain.Chain
	table     *table.Table
	proxy     *proxy.Proxy
	mesh      *mesh.Mesh           // nil when mesh.listen is empty
	forwarder *proxy.MeshForwarder // nil without a mesh
	dispatch  *dispatch.Dispatcher
	host      *host.Host
	adopter   *runner.Adopter
	admin     *admin.Server
	log       *zap.Logger
	level     zap.AtomicLevel
	cfgPath   string
	started   time.Time
	reloadOK  prometheus.Gauge
	reloadSum *prometheus.CounterVec

	mu      sync.Mutex // guards cfg, lastErr
	cfg     *config.Config
	lastErr string
}

func runDaemon(ctx context.Context, o daemonOptions) (err error) {
	cfg := o.cfg
	level := zap.NewAtomicLevel()
	if err := level.UnmarshalText([]byte(cfg.Log.Level)); err != nil {
		return usageError("log.level: %v", err)
	}
	log := newLogger(cfg.Log.Format, level, o.stderr)
	defer func() { _ = log.Sync() }()

	if err := os.MkdirAll(cfg.Node.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	id, created, err := identity.LoadOrGenerate(identity.KeyPath(cfg.Node.DataDir))
	if err != nil {
		return err
	}
	if created {
		log.Info("generated node key", zap.String("path", identity.KeyPath(cfg.Node.DataDir)))
	}
	log = log.With(zap.String("node_id", id.ID()))

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
	reloadOK := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nodeld_config_last_reload_successful",
		Help: "Whether the last config load or reload succeeded (1) or was refused (0).",
	})
	reloadSum := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeld_config_reloads_total",
		Help: "Config reloads by result (ok, refused).",
	}, []string{"result"})
	reg.MustRegister(buildInfo, reloadOK, reloadSum)
	reloadOK.Set(1)

	chainPath := filepath.Join(cfg.Node.DataDir, chainFileName)
	ch, err := openChain(chainPath, id, o.chainReset, reg, log)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := ch.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close chain: %w", cerr)
		}
	}()
	// Every record a remote party can trigger goes through this one
	// recorder, so a peer cannot fill the chain.
	rec, err := chain.NewRecorder(ch, chain.RecorderOptions{Logger: log.Named("chain"), Registerer: reg})
	if err != nil {
		return err
	}

	n := &node{
		id: id, chain: ch, log: log, level: level, cfgPath: o.cfgPath,
		started: time.Now(), reloadOK: reloadOK, reloadSum: reloadSum, cfg: cfg,
	}
	// The table asks the mesh who is admitted, and the mesh feeds the
	// table: the admission is bound once both exist.
	admission := &meshAdmission{}
	n.table = table.New(id.ID(), table.Options{
		Admission: admission,
		Audit:     ch,
		RecordRefusal: func(sender, kind, reason string, payload any) error {
			_, err := rec.Record(chain.RecordKey{Sender: sender, Kind: kind, Reason: reason}, table.AuditSource, payload)
			return err
		},
		Registerer: reg,
		Load: func(role string) (int, int) {
			if n.proxy == nil {
				return 0, 0
			}
			return n.proxy.Inflight(role)
		},
	})
	if cfg.Mesh.Listen != "" {
		n.mesh, err = mesh.New(meshConfig(cfg), mesh.Deps{
			Identity:   id,
			DataDir:    cfg.Node.DataDir,
			Table:      n.table,
			Audit:      ch,
			Recorder:   rec,
			Logger:     log.Named("mesh"),
			Registerer: reg,
			// A peer pinned on first contact gets an id: allowlists that
			// name it can now be applied.
			OnPeersChanged: func() { n.table.ApplyPolicy(n.rolePolicies(n.config())) },
			// The workload-host advertisement goes to every peer.
			ExtraAdverts: func() []table.Advertisement {
				return []table.Advertisement{n.host.Advertisement(time.Now())}
			},
			// A peer that joins or comes back gets the revocation
			// notices this node holds (n.host is set before the mesh runs).
			OnLinkUp: func(ctx context.Context, p mesh.PeerInfo) { n.host.ReplayNotices(ctx, p) },
		})
		if err != nil {
			return err
		}
		admission.m = n.mesh
	}
	n.table.ApplyPolicy(n.rolePolicies(cfg))

	pdeps := proxy.Deps{
		Resolver:   n.table,
		Ports:      n.table,
		Logger:     log.Named("proxy"),
		Registerer: reg,
	}
	if n.mesh != nil {
		n.forwarder, err = proxy.NewMeshForwarder(proxy.MeshDeps{
			Mesh: n.mesh, Table: n.table, Recorder: rec, Logger: log.Named("proxy.mesh"), Registerer: reg,
			MaxInflightPerPeer: cfg.Mesh.MaxInflightPerPeer,
			MaxInflightTotal:   cfg.Mesh.MaxInflightTotal,
			MaxBodyBytes:       cfg.Inference.Limits.MeshMaxBodyBytes,
		})
		if err != nil {
			return err
		}
		defer n.forwarder.CloseIdleConnections()
		n.mesh.Handle(mesh.KindInfer, n.forwarder.ServeStream)
		pdeps.Remote = n.forwarder
	}
	n.proxy, err = proxy.New(proxyConfig(cfg), pdeps)
	if err != nil {
		return err
	}
	n.adopter, err = runner.NewAdopter(adopterConfig(cfg), adoptedSlots{n.table}, log.Named("runner"), reg)
	if err != nil {
		return err
	}
	// One revocation list: the host enforces it, the operator edits it.
	rev, err := pkg.OpenRevocations(filepath.Join(cfg.Node.DataDir, pkg.RevocationsFile), time.Now)
	if err != nil {
		return err
	}
	n.host, err = newHost(cfg, id, n, ch, rec, rev, reg, log)
	if err != nil {
		return err
	}
	n.host.Register() // before the mesh runs; a no-op without a mesh
	n.dispatch, err = dispatch.New(dispatch.Deps{
		Identity: id, Mesh: n.mesh, Chain: ch, Logger: log, Registerer: reg,
		Local: &localHost{n: n}, Revocations: rev,
		Notices: n.host, DataDir: cfg.Node.DataDir,
	})
	if err != nil {
		return err
	}
	n.dispatch.Register() // before the mesh runs; a no-op without a mesh
	operator, err := dispatch.NewOperatorServer(dispatch.OperatorConfig{Path: cfg.SocketPath()}, n.dispatch, log)
	if err != nil {
		return err
	}
	n.admin, err = admin.New(admin.Config{Listen: cfg.Admin.Listen}, admin.Deps{
		Gatherer: reg,
		Status:   n.status,
		Logger:   log.Named("admin"),
	})
	if err != nil {
		return err
	}
	for _, c := range []string{readyAdmin, readyProxy} {
		n.admin.Require(c)
	}
	if n.mesh != nil {
		n.admin.Require(readyMesh)
	}
	// Not ready while appends fail; /readyz shows the chain's error.
	n.admin.Check(readyChain, ch.Healthy)

	if _, err := ch.Append(chainSource, "node.start", map[string]any{
		"node_id": id.ID(), "name": cfg.Node.Name, "version": buildVersion(),
		"config": configSource(o.cfgPath), "pid": os.Getpid(),
	}); err != nil {
		return fmt.Errorf("chain node.start: %w", err)
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// Shutdown order: the proxy drains its clients' requests first (the
	// instances and links they use stay up meanwhile), then everything
	// else stops; the chain is closed last, after g.Wait.
	g, gctx := errgroup.WithContext(ctx)
	rest, stopRest := context.WithCancel(context.WithoutCancel(gctx))
	defer stopRest()
	g.Go(func() error {
		defer stopRest()
		return n.proxy.Run(gctx)
	})
	g.Go(func() error { return n.supervise(gctx, hup) })
	g.Go(func() error { return n.admin.Run(rest) })
	g.Go(func() error { return n.adopter.Run(rest) })
	g.Go(func() error { return operator.Run(rest) })
	g.Go(func() error { return n.host.Run(rest) })
	g.Go(func() error { return rec.Run(rest) })
	if n.mesh != nil {
		g.Go(func() error { return n.mesh.Run(rest) })
	}

	runErr := g.Wait()
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
			n.reload(ctx)
		case <-watchdog:
			if ok, _ := n.admin.Ready(); ok {
				_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}
	}
}

// reload re-reads the config file and applies it all or nothing: a file
// that does not load or validate, or that changes what needs a restart,
// keeps the old config and sets the reload gauge to 0.
func (n *node) reload(ctx context.Context) {
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReloading)
	defer func() { _, _ = daemon.SdNotify(false, daemon.SdNotifyReady) }()
	err := n.applyReload()
	if err != nil {
		n.reloadOK.Set(0)
		n.reloadSum.WithLabelValues("refused").Inc()
		n.mu.Lock()
		n.lastErr = err.Error()
		n.mu.Unlock()
		n.log.Error("config reload refused; keeping the old config", zap.Error(err))
		if _, cerr := n.chain.Append(chainSource, "config.reload", map[string]any{
			"ok": false, "config": configSource(n.cfgPath), "error": err.Error(),
		}); cerr != nil {
			n.log.Error("chain config.reload", zap.Error(cerr))
		}
		return
	}
	n.reloadOK.Set(1)
	n.reloadSum.WithLabelValues("ok").Inc()
	n.mu.Lock()
	n.lastErr = ""
	n.mu.Unlock()
	n.log.Info("config reloaded", zap.String("config", configSource(n.cfgPath)))
}

func (n *node) applyReload() error {
	var next *config.Config
	var err error
	if n.cfgPath == "" {
		next, err = config.LoadEmbedded()
	} else {
		next, err = config.Load(n.cfgPath)
	}
	if err != nil {
		return err
	}
	if err := absolutePaths(next); err != nil {
		return err
	}
	n.mu.Lock()
	old := n.cfg
	n.mu.Unlock()
	diff := config.Changed(old, next)
	if diff.NeedsRestart() {
		return fmt.Errorf("%s change only with a restart", strings.Join(diff.Restart, ", "))
	}
	level := zap.NewAtomicLevel()
	if err := level.UnmarshalText([]byte(next.Log.Level)); err != nil {
		return fmt.Errorf("log.level: %w", err)
	}
	if next.Log.Format != old.Log.Format {
		return errors.New("log.format changes only with a restart")
	}
	if n.mesh != nil {
		if err := meshConfig(next).Validate(n.id.PublicKey()); err != nil {
			return err
		}
	}
	// The proxy is the only part that can fail to apply (a port in use):
	// apply it first, and nothing else changes when it fails.
	if err := n.proxy.ApplyConfig(proxyConfig(next)); err != nil {
		return err
	}
	if err := n.adopter.ApplyConfig(adopterConfig(next)); err != nil {
		// Validation already passed, so this is a bug; undo the proxy.
		_ = n.proxy.ApplyConfig(proxyConfig(old))
		return err
	}
	hostCfg, err := hostConfig(next)
	if err != nil {
		_ = n.proxy.ApplyConfig(proxyConfig(old))
		_ = n.adopter.ApplyConfig(adopterConfig(old))
		return err
	}
	if n.mesh != nil {
		if err := n.mesh.ApplyConfig(meshConfig(next)); err != nil {
			_ = n.proxy.ApplyConfig(proxyConfig(old))
			_ = n.adopter.ApplyConfig(adopterConfig(old))
			return err
		}
		if err := n.forwarder.SetLimits(next.Mesh.MaxInflightPerPeer, next.Mesh.MaxInflightTotal, next.Inference.Limits.MeshMaxBodyBytes); err != nil {
			n.log.Error("mesh forwarding limits not applied", zap.Error(err))
		}
	}
	if err := n.host.ApplyConfig(hostCfg); err != nil {
		n.log.Error("host config not applied", zap.Error(err))
	}
	n.level.SetLevel(level.Level())
	n.mu.Lock()
	n.cfg = next
	n.mu.Unlock()
	n.table.ApplyPolicy(n.rolePolicies(next))
	if _, err := n.chain.Append(chainSource, "config.reload", map[string]any{
		"ok": true, "config": configSource(n.cfgPath), "changed": diff.Fields,
	}); err != nil {
		n.log.Error("chain config.reload", zap.Error(err))
	}
	return nil
}

// openChain opens the audit chain, archiving a broken one first when the
// operator asked for it.
func openChain(path string, id *identity.Identity, reset bool, reg prometheus.Registerer, log *zap.Logger) (*chain.Chain, error) {
	opts := chain.Options{Logger: log.Named("chain"), Registerer: reg}
	ch, report, err := chain.Open(path, id.PrivateKey(), opts)
	if errors.Is(err, chain.ErrBroken) && reset {
		breakErr := err
		archived, aerr := chain.Archive(path, time.Now())
		if aerr != nil {
			return nil, fmt.Errorf("archive broken chain: %w", aerr)
		}
		log.Warn("archived a broken chain and started a new one", zap.String("archived", archived), zap.NamedError("break", breakErr))
		ch, report, err = chain.Open(path, id.PrivateKey(), opts)
		if err == nil {
			if _, aerr := ch.Append(chainSource, "node.chain_reset", map[string]any{"archived": archived, "break": breakErr.Error()}); aerr != nil {
				_ = ch.Close()
				return nil, aerr
			}
		}
	}
	if err != nil {
		if errors.Is(err, chain.ErrBroken) {
			return nil, fmt.Errorf("%w; inspect it with nodeld chain verify %s, or start with --chain-reset to archive it and begin a new chain", err, path)
		}
		return nil, err
	}
	if report != nil && report.Torn != nil {
		log.Warn("cut a torn last chain entry left by a crash; the original file was kept",
			zap.String("copy", report.Torn.KeptAt), zap.Int64("bytes_cut", report.Torn.Bytes))
		if _, err := ch.Append(chainSource, "node.chain_torn_tail", map[string]any{"copy": report.Torn.KeptAt, "bytes_cut": report.Torn.Bytes}); err != nil {
			_ = ch.Close()
			return nil, err
		}
	}
	return ch, nil
}

// config returns the config in force.
func (n *node) config() *config.Config {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cfg
}

// meshAdmission lets the table ask the mesh who is admitted; with no mesh
// nobody is.
type meshAdmission struct{ m *mesh.Mesh }

func (a *meshAdmission) IsAdmitted(nodeID string) bool {
	return a.m != nil && a.m.IsAdmitted(nodeID)
}

func newLogger(format string, level zap.AtomicLevel, w io.Writer) *zap.Logger {
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if format == "console" {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
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
