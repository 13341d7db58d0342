package host

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/reload"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/sandbox"
	"github.com/nodeld/nodeld/internal/table"
)

// AuditSource is the chain source of every host record.
const AuditSource = "host"

// Chain record kinds.
const (
	KindPlaceBegin      = "host.place.begin"
	KindFetchDone       = "host.fetch.done"
	KindPlaceOK         = "host.place.ok"
	KindPlaceRefused    = "host.place.refused"
	KindStartBegin      = "host.start.begin"
	KindStart           = "host.start"
	KindStop            = "host.stop"
	KindUnload          = "host.unload"
	KindRestart         = "host.restart"
	KindFailed          = "host.failed"
	KindRevokedTeardown = "host.revoked.teardown"
	KindCtlRefused      = "host.ctl.refused"
)

// Config is the host's reloadable configuration.
type Config struct {
	// Enabled serves the mutating methods; a disabled host still answers
	// describe, status and logs (to the callers below), and refuses the
	// rest (unauthorized).
	Enabled bool
	// Controllers are the keys that may call every method.
	Controllers []ed25519.PublicKey
	// ReaderKeys and ReaderPeers are who, besides the controllers, may
	// call status and logs; every other admitted peer may call describe
	// only. ReaderPeers are names of configured mesh peers, resolved
	// through the mesh at each call, so a peer pinned on first contact
	// becomes a reader once its key is known.
	ReaderKeys  []ed25519.PublicKey
	ReaderPeers []string
	// TrustAnchors are the package publishers this node accepts.
	TrustAnchors pkg.Anchors
	// DataDir holds packages/ (fetched packages and .partial/).
	DataDir string
	// Labels ride on the advertisement (label.<k>).
	Labels map[string]string
	// Class is the node's class (node.class): a reload sets it on the
	// facts source, which claims node.class.<class> (facts.ValidateClass).
	Class string
	// RestartPolicy bounds supervised restarts; zero means
	// runner.DefaultRestartPolicy (5 in 10 minutes, 2 s doubling to 30 s).
	RestartPolicy runner.RestartPolicy
	// HealthInterval is the supervisors' health poll period; zero means
	// runner.DefaultHealthInterval. Not reloadable for running instances.
	HealthInterval time.Duration
}

// Mesh is the part of the mesh the host uses; *mesh.Mesh implements it.
type Mesh interface {
	Handle(kind mesh.StreamKind, h mesh.Handler)
	OpenStream(ctx context.Context, nodeID string, kind mesh.StreamKind) (*mesh.Stream, error)
	Peer(nodeID string) (mesh.PeerInfo, bool)
	IsAdmitted(nodeID string) bool
	ResolveRef(ref string) (string, bool)
}

var _ Mesh = (*mesh.Mesh)(nil)

// Table is where inference instances register their role while healthy;
// *table.Table implements it. Each instance holds its own registration
// (the returned slot) and releases only that one.
type Table interface {
	RegisterLocal(origin table.Origin, role, base, model, api, runtime string) (*table.LocalSlot, error)
}

var _ Table = (*table.Table)(nil)

// Auditor is the audit chain: Record fails closed, Head is its last entry.
type Auditor interface {
	Record(source, kind string, payload any) error
	Head() (seq uint64, hash string)
}

// Recorder chains events that a remote party can trigger, counting the
// repeats of a key instead of chaining each (*chain.Recorder).
type Recorder interface {
	Record(key chain.RecordKey, source string, payload any) (chained bool, err error)
}

var _ Recorder = (*chain.Recorder)(nil)

// Deps are the host's collaborators.
type Deps struct {
	// Identity is this node's key; required.
	Identity *identity.Identity
	// Mesh carries ctl calls and artifact streams; nil means local calls
	// only (ServeLocal).
	Mesh Mesh
	// Table receives inference roles; nil registers nothing.
	Table Table
	// Audit is the chain; required (a control action whose record cannot
	// be written is not taken).
	Audit Auditor
	// Recorder records the refusals a caller can repeat at will (of
	// unauthenticated and of read-only calls, of notices), keyed by the
	// authenticated peer, kind and refusal code, so that a flood of them
	// grows the chain by a bounded number of entries; required.
	Recorder Recorder
	// Revocations is the node's revocation list; required.
	Revocations *pkg.Revocations
	// Facts signs describe's facts and gives the free memory and runtimes
	// for admission; nil answers describe with null facts and admits
	// without those checks.
	Facts *facts.Source
	// Logger; nil logs nothing.
	Logger *zap.Logger
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock of requests, chain payloads and restart windows;
	// nil means time.Now.
	Now func() time.Time
	// StopFault (tests only) is called with the instance id before the
	// host stops an instance's process (stop, unload, a revocation
	// teardown); a non-nil error fails that stop, before anything is
	// withdrawn, as a process that survives its kill would: the caller
	// is refused (runtime, "unload failed: ...") and the instance stays.
	// nil in the daemon.
	StopFault func(instanceID string) error
	// ReplayWait, when set, is the pause between two notices replayed to
	// a peer (ReplayNotices): called with the link's context, the peer
	// and how many notices went out so far, it returns when the next may
	// go; an error stops the replay. nil waits NoticeReplayPace, or until
	// the link goes. Tests set it to step a replay themselves.
	ReplayWait func(ctx context.Context, peerID string, sent int) error
	// Isolation, when set, isolates every placed instance of a process
	// kind (host.isolation, internal/sandbox) and refuses to place one it
	// cannot isolate as configured; nil starts instances as the daemon.
	Isolation *sandbox.Isolator
}

// Host is the workload host. See the package documentation. It wires its
// parts, each a type with one job and its own lock (or none), and is what
// the daemon calls:
//
//   - front (serve.go): the signed calls of workload.ctl, verified and
//     routed to the lifecycle or the read model, counted and chained;
//   - lifecycle (lifecycle.go, place.go): place, load, start, stop and
//     unload of instances;
//   - registry (registry.go): the places in flight, the listed and the
//     departed instances;
//   - supervisors (supervise.go) and roles (roles.go): the processes of
//     the listed instances and their registrations in the table;
//   - store (package.go, fetch.go): the package directories, fetched and
//     removed;
//   - isolation (isolate.go): the sandbox of each placed instance;
//   - revoker (revoke.go) and notices (notice.go): the revocation list
//     enforced on instances, and the signed notices that change it;
//   - readModel (view.go): describe, status, logs, the advertisement and
//     Status;
//   - journal (journal.go): the chain records of them all.
//
// Host itself holds the reloadable config.
type Host struct {
	self     *identity.Identity
	mesh     Mesh
	facts    *facts.Source
	log      *zap.Logger
	verifier *ctl.Verifier
	met      *metrics

	front *front
	lc    *lifecycle
	reg   *registry
	sup   *supervisors
	iso   *isolation
	revk  *revoker
	notes *notices
	view  *readModel

	// mu guards cfg. It is never held across I/O or a call into another
	// part.
	mu  sync.Mutex
	cfg Config
}

// New validates cfg and deps and returns a Host. It registers and starts
// nothing.
func New(cfg Config, deps Deps) (*Host, error) {
	var errs []error
	if deps.Identity == nil {
		errs = append(errs, errors.New("identity is required"))
	}
	if deps.Audit == nil {
		errs = append(errs, errors.New("audit chain is required"))
	}
	if deps.Recorder == nil {
		errs = append(errs, errors.New("recorder is required"))
	}
	if deps.Revocations == nil {
		errs = append(errs, errors.New("revocation list is required"))
	}
	if err := CheckConfig(cfg); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	log, now, replayWait := deps.Logger, deps.Now, deps.ReplayWait
	if log == nil {
		log = zap.NewNop()
	}
	if now == nil {
		now = time.Now
	}
	if replayWait == nil {
		replayWait = WaitReplayPace
	}
	h := &Host{self: deps.Identity, mesh: deps.Mesh, facts: deps.Facts, log: log, cfg: cloneConfig(cfg)}
	h.reg = newRegistry(now)
	met, err := newMetrics(deps.Registerer, h.reg.instanceCount)
	if err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	h.met = met
	jnl := &journal{audit: deps.Audit, rec: deps.Recorder, failures: met.auditFailures, log: log}
	if h.iso, err = newIsolation(deps.Isolation, jnl, log, deps.Registerer); err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	st := &store{dataDir: cfg.DataDir, rev: deps.Revocations, inUse: h.reg.packageInUse, jnl: jnl, met: met, log: log,
		removing: map[string]chan struct{}{}}
	rl := &roles{table: deps.Table, met: met, log: log}
	h.sup = &supervisors{config: h.config, roles: rl, jnl: jnl, met: met, log: log, now: now, stopFault: deps.StopFault}
	h.lc = &lifecycle{self: deps.Identity, rev: deps.Revocations, facts: deps.Facts, config: h.config, reg: h.reg,
		store: st, iso: h.iso, sup: h.sup, jnl: jnl, met: met, log: log, now: now}
	h.revk = &revoker{rev: deps.Revocations, reg: h.reg, sup: h.sup, iso: h.iso, store: st, jnl: jnl, met: met, log: log}
	h.view = &readModel{self: deps.Identity, facts: deps.Facts, audit: deps.Audit, config: h.config, reg: h.reg,
		iso: h.iso, now: now}
	fenced, err := loadTerms(filepath.Join(cfg.DataDir, TermsFile), met.terms)
	if err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	h.front = &front{self: deps.Identity, mesh: deps.Mesh, terms: fenced, config: h.config, lc: h.lc, view: h.view, jnl: jnl,
		met: met, log: log}
	v, err := ctl.NewVerifier(ctl.VerifierConfig{
		Self:        deps.Identity.PublicKey(),
		Controllers: cfg.Controllers,
		ReadOnly:    h.front.readOnly,
		Now:         now,
	})
	if err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	h.verifier, h.front.verifier = v, v
	h.notes = &notices{self: deps.Identity, mesh: deps.Mesh, rev: deps.Revocations, config: h.config, jnl: jnl,
		met: met, log: log, now: now, replayWait: replayWait}
	if err := h.notes.load(); err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	return h, nil
}

// CheckConfig is the static check of a Config, the one New and Prepare
// make: it reads nothing and needs no Host, so a config can be checked
// before a node runs. Labels must be valid facts labels
// (facts.ValidateLabels: no tier or trust labels), and the class a valid
// facts class (facts.ValidateClass).
func CheckConfig(cfg Config) error {
	var errs []error
	if cfg.DataDir == "" {
		errs = append(errs, errors.New("data dir is required"))
	}
	if err := facts.ValidateLabels(cfg.Labels); err != nil {
		errs = append(errs, err)
	}
	if err := facts.ValidateClass(cfg.Class); err != nil {
		errs = append(errs, err)
	}
	for i, k := range cfg.Controllers {
		if len(k) != ed25519.PublicKeySize {
			errs = append(errs, fmt.Errorf("controller key %d has %d bytes", i, len(k)))
		}
	}
	for i, k := range cfg.TrustAnchors {
		if len(k) != ed25519.PublicKeySize {
			errs = append(errs, fmt.Errorf("trust anchor %d has %d bytes", i, len(k)))
		}
	}
	for i, k := range cfg.ReaderKeys {
		if len(k) != ed25519.PublicKeySize {
			errs = append(errs, fmt.Errorf("reader key %d has %d bytes", i, len(k)))
		}
	}
	if cfg.RestartPolicy != (runner.RestartPolicy{}) {
		if err := cfg.RestartPolicy.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.HealthInterval < 0 {
		errs = append(errs, fmt.Errorf("negative health interval %s", cfg.HealthInterval))
	}
	return errors.Join(errs...)
}

func cloneConfig(cfg Config) Config {
	cfg.Controllers = slices.Clone(cfg.Controllers)
	cfg.TrustAnchors = slices.Clone(cfg.TrustAnchors)
	cfg.ReaderKeys = slices.Clone(cfg.ReaderKeys)
	cfg.ReaderPeers = slices.Clone(cfg.ReaderPeers)
	cfg.Labels = maps.Clone(cfg.Labels)
	return cfg
}

// ApplyConfig reloads controllers, readers, anchors, labels, Enabled and
// the restart policy (for supervisors started later): Prepare, then its
// commit. DataDir cannot change.
func (h *Host) ApplyConfig(cfg Config) error {
	p, err := h.Prepare(cfg)
	if err != nil {
		return err
	}
	p.Commit()
	return nil
}

// Prepare checks cfg (CheckConfig, and the same DataDir) and returns the
// change (the reload contract, internal/reload) that puts in force: the controllers the verifier accepts, the
// config, and the labels of the advertisement and of the signed facts
// (the next describe signs them with a new seq). Prepare changes nothing;
// the commit cannot fail.
func (h *Host) Prepare(cfg Config) (reload.Prepared, error) {
	if err := CheckConfig(cfg); err != nil {
		return nil, fmt.Errorf("apply host config: %w", err)
	}
	h.mu.Lock()
	old := h.cfg.DataDir
	h.mu.Unlock()
	if cfg.DataDir != old {
		return nil, fmt.Errorf("apply host config: data dir cannot change without a restart")
	}
	cfg = cloneConfig(cfg)
	return reload.Commit(func() {
		// Neither call can fail: CheckConfig checked the keys' sizes and
		// the labels as these check them.
		if err := h.verifier.SetControllers(cfg.Controllers); err != nil {
			h.log.DPanic("checked controllers refused", zap.Error(err))
		}
		if h.facts != nil {
			if err := h.facts.SetLabels(cfg.Labels); err != nil {
				h.log.DPanic("checked labels refused", zap.Error(err))
			}
			if err := h.facts.SetClass(cfg.Class); err != nil {
				h.log.DPanic("checked class refused", zap.Error(err))
			}
		}
		h.mu.Lock()
		h.cfg = cfg
		h.mu.Unlock()
	}), nil
}

func (h *Host) config() Config {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cfg
}

// Register installs the ctl and notice handlers on the mesh. Call it
// before the mesh's Run.
func (h *Host) Register() {
	if h.mesh != nil {
		h.mesh.Handle(mesh.KindCtl, h.front.serveCtl)
		h.mesh.Handle(mesh.KindNotice, h.notes.serve)
	}
}

// Run runs the revocation watcher and owns every instance's supervisor.
// When ctx ends it stops every instance (shutdownGrace), deregisters
// their roles, waits for every goroutine it owns, and returns nil.
func (h *Host) Run(ctx context.Context) error {
	if err := h.sup.run(ctx); err != nil {
		return err
	}
	h.revk.watch(ctx)
	h.sup.stopAll(h.reg.sorted)
	// No instance outlives the host that started it: each one's scratch
	// directory, cgroup and uid go with it.
	for _, in := range h.reg.sorted() {
		h.iso.release(in)
	}
	return nil
}

// ServeLocal serves one workload.ctl call from this node's own operator
// (the local socket), without a mesh stream: the request must be signed
// with the node's own key, which stands for the QUIC peer key, and must
// name this node as target. The node key is a controller for local calls
// only if Config.Controllers lists it. artifacts opens streams to the
// local artifact server for place and load (the same protocol as over the
// mesh); nil refuses them with fetch. It returns I/O errors only.
func (h *Host) ServeLocal(ctx context.Context, s ctl.Stream, artifacts ArtifactOpener) error {
	return h.front.serve(ctx, s, h.self.PublicKey(), h.self.ID(), artifacts)
}

// SubmitNotice applies a signed notice from this node's operator and
// forwards it to every linked peer. A notice signed by this node's own key
// always verifies here; peers apply it only if that key is among their
// controllers. A notice already applied (or older than the last one of its
// issuer) returns an error wrapping pkg.ErrStaleNotice.
func (h *Host) SubmitNotice(ctx context.Context, raw []byte) error {
	return h.notes.submit(ctx, raw)
}

// ReplayNotices sends the replay log to peer, oldest first,
// NoticeReplayPace apart (Deps.ReplayWait), unless a replay to peer
// completed less than NoticeReplayCooldown ago. It stops at the first
// failed send or when ctx ends (the mesh's OnLinkUp context ends with the
// link): nothing more is sent for that link. A replay cut short does not
// count for the cooldown, so the peer's next link replays the whole log
// again, even one that came up before the old replay noticed its link
// had gone (a simultaneous dial, a quick return).
func (h *Host) ReplayNotices(ctx context.Context, peer mesh.PeerInfo) {
	h.notes.replayTo(ctx, peer)
}

// Advertisement returns the workload-host advertisement (ctl.HostAdvertName):
// the methods, ctl.VersionTerm and the metadata of ctl.HostMetadata (instances,
// in_flight, enabled and label.<k>).
func (h *Host) Advertisement(now time.Time) table.Advertisement {
	return h.view.advertisement(now)
}

// Status returns in-flight decisions, instances and departed instances,
// each sorted (in-flight by start time, instances by id), and the
// controller term the host fences by.
func (h *Host) Status() HostStatus {
	st := h.view.hostStatus()
	_, st.ControllerTerm = h.ControllerTerm()
	return st
}

// Isolation is what this host enforces on the instances it starts, and
// false when it isolates nothing (no Isolator).
func (h *Host) Isolation() (sandbox.Support, bool) { return h.iso.support() }

// ControllerTerm returns the id of the set host.controllers names now
// (ControllerSet; empty for none) and the highest raft term this host has
// seen from it (0: none yet): a controller's call with a lower one is
// refused stale_term.
func (h *Host) ControllerTerm() (set string, term uint64) {
	set = ControllerSet(h.config().Controllers)
	if set == "" {
		return "", 0
	}
	return set, h.front.terms.highest(set)
}
