package host

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
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

// Host is the workload host. See the package documentation.
type Host struct {
	// iso isolates placed instances (nil: none); isoMet counts OOM kills.
	iso    *sandbox.Isolator
	isoMet *isolationMetrics
	self   *identity.Identity
	mesh   Mesh
	table  Table
	audit  Auditor
	rec    Recorder
	rev    *pkg.Revocations
	facts  *facts.Source
	log    *zap.Logger
	now    func() time.Time
	// stopFault is Deps.StopFault (tests only; nil in the daemon).
	stopFault func(instanceID string) error
	// ollamaURL is the Ollama daemon the ollama packages drive, "" for
	// runner.DefaultOllamaURL; tests set it (under mu) to a fake daemon.
	ollamaURL string
	// replayWait paces a notice replay (Deps.ReplayWait, else
	// WaitReplayPace).
	replayWait func(ctx context.Context, peerID string, sent int) error
	verifier   *ctl.Verifier
	met        *metrics
	// notes is the replay log of revocation notices (notice.go).
	notes notices

	// mu guards every field below. It is never held across I/O, a
	// process start or stop, or a call into the table or the chain.
	mu       sync.Mutex
	cfg      Config
	inflight map[string]*inflight // by decision id
	reserved map[string]string    // instance id -> decision id of a place in progress
	insts    map[string]*instance // by instance id
	departed []ctl.Departed       // newest last, at most MaxDeparted
	runCtx   context.Context      // nil until Run; then Run's ctx
	stopping bool                 // Run is ending: no new supervisors
	wg       sync.WaitGroup       // supervisor goroutines

	// removing maps a package directory name being removed to a channel
	// closed once it is gone (package.go).
	removing map[string]chan struct{}
}

// inflight is a place or load being handled.
type inflight struct {
	decision   string
	pkgID      string
	version    string
	instanceID string
	pkgDir     string // its package directory's name (packageDirName)
	since      time.Time
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
	h := &Host{
		self: deps.Identity, mesh: deps.Mesh, table: deps.Table, audit: deps.Audit, rec: deps.Recorder,
		rev: deps.Revocations, facts: deps.Facts, log: deps.Logger, now: deps.Now, stopFault: deps.StopFault,
		replayWait: deps.ReplayWait, iso: deps.Isolation,
		cfg:      cloneConfig(cfg),
		inflight: map[string]*inflight{},
		reserved: map[string]string{},
		insts:    map[string]*instance{},
		removing: map[string]chan struct{}{},
	}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.replayWait == nil {
		h.replayWait = WaitReplayPace
	}
	v, err := ctl.NewVerifier(ctl.VerifierConfig{
		Self:        deps.Identity.PublicKey(),
		Controllers: cfg.Controllers,
		ReadOnly:    h.readOnly,
		Now:         h.now,
	})
	if err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	h.verifier = v
	met, err := newMetrics(deps.Registerer, h.instanceCount)
	if err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	h.met = met
	if h.isoMet, err = newIsolationMetrics(deps.Registerer); err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	if err := h.loadNotices(); err != nil {
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

// readOnly is the verifier's rule for callers that are not controllers:
// this node (the local operator) may call describe, status and logs; an
// admitted mesh peer may call describe, and status and logs only if it is
// a reader. It holds whether the host is enabled or not.
func (h *Host) readOnly(k ed25519.PublicKey, m ctl.Method) bool {
	if k.Equal(h.self.PublicKey()) {
		return true
	}
	if h.mesh == nil || !h.mesh.IsAdmitted(identity.NodeID(k)) {
		return false
	}
	return m == ctl.MethodDescribe || h.isReader(k)
}

// isReader reports whether k is a configured reader: one of ReaderKeys,
// or the key of an admitted peer that ReaderPeers names.
func (h *Host) isReader(k ed25519.PublicKey) bool {
	cfg := h.config()
	if slices.ContainsFunc(cfg.ReaderKeys, func(r ed25519.PublicKey) bool { return r.Equal(k) }) {
		return true
	}
	if h.mesh == nil {
		return false
	}
	for _, name := range cfg.ReaderPeers {
		id, ok := h.mesh.ResolveRef(name)
		if !ok {
			continue
		}
		if p, ok := h.mesh.Peer(id); ok && p.Key.Equal(k) {
			return true
		}
	}
	return false
}

// ApplyConfig reloads controllers, readers, anchors, labels, Enabled and
// the restart policy (for supervisors started later): Prepare, then its
// commit. DataDir cannot change.
func (h *Host) ApplyConfig(cfg Config) error {
	commit, err := h.Prepare(cfg)
	if err != nil {
		return err
	}
	commit()
	return nil
}

// Prepare checks cfg (CheckConfig, and the same DataDir) and returns the
// function that puts it in force: the controllers the verifier accepts, the
// config, and the labels of the advertisement and of the signed facts
// (the next describe signs them with a new seq). Prepare changes nothing;
// the commit cannot fail.
func (h *Host) Prepare(cfg Config) (commit func(), err error) {
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
	return func() {
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
	}, nil
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
		h.mesh.Handle(mesh.KindCtl, h.serveCtl)
		h.mesh.Handle(mesh.KindNotice, h.serveNotice)
	}
}

// Run runs the revocation watcher and owns every instance's supervisor.
// When ctx ends it stops every instance (shutdownGrace), deregisters
// their roles, waits for every goroutine it owns, and returns nil.
func (h *Host) Run(ctx context.Context) error {
	h.mu.Lock()
	if h.runCtx != nil {
		h.mu.Unlock()
		return errors.New("host already running")
	}
	h.runCtx = ctx
	h.mu.Unlock()

	changes, cancel := h.rev.Subscribe()
	defer cancel()
	h.sweepRevocations(ctx)
	sweep := time.NewTicker(RevocationSweep)
	defer sweep.Stop()
	var retry <-chan time.Time
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-changes:
		case <-sweep.C:
		case <-retry:
		}
		if ctx.Err() != nil {
			break
		}
		retry = nil
		if !h.sweepRevocations(ctx) {
			retry = time.After(TeardownRetry)
		}
	}
	h.shutdown()
	return nil
}

// shutdown stops every instance and releases every role registration.
func (h *Host) shutdown() {
	h.mu.Lock()
	h.stopping = true
	insts := slices.Collect(maps.Values(h.insts))
	h.mu.Unlock()
	for _, in := range insts {
		in.stopSupervisor(shutdownGrace)
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace+5*time.Second)
		if err := in.managed.Stop(ctx, shutdownGrace); err != nil {
			h.log.Warn("stop instance on shutdown", zap.String("instance", in.id), zap.Error(err))
		}
		cancel()
	}
	h.wg.Wait()
	for _, in := range insts {
		h.deregisterRole(in)
	}
}

// Advertisement returns the workload-host advertisement (ctl.HostAdvertName):
// the methods, ctl.Version and the metadata of ctl.HostMetadata (instances,
// in_flight, enabled and label.<k>).
func (h *Host) Advertisement(now time.Time) table.Advertisement {
	h.mu.Lock()
	md := ctl.HostMetadata{
		Instances: len(h.insts),
		InFlight:  len(h.inflight),
		Enabled:   h.cfg.Enabled,
		Labels:    h.cfg.Labels,
	}.Metadata()
	h.mu.Unlock()
	methods := make([]string, 0, 8)
	for _, m := range ctl.Methods() {
		methods = append(methods, string(m))
	}
	return table.Advertisement{
		Name: ctl.HostAdvertName, NodeID: h.self.ID(), Methods: methods, Version: strconv.Itoa(ctl.Version),
		Metadata: md, LastUpdated: now.Unix(),
	}
}

// HostStatus is the host's part of /v1/status.
type HostStatus struct {
	Enabled   bool             `json:"enabled"`
	InFlight  []InFlightStatus `json:"in_flight"`
	Instances []InstanceInfo   `json:"instances"`
	Departed  []ctl.Departed   `json:"departed"`
	// Isolation is what the host enforces on the instances it starts;
	// nil when it isolates nothing.
	Isolation *sandbox.Support `json:"isolation,omitempty"`
}

// InFlightStatus is a place being handled.
type InFlightStatus struct {
	DecisionID string    `json:"decision_id"`
	Package    string    `json:"package,omitempty"`
	Version    string    `json:"version,omitempty"`
	InstanceID string    `json:"instance_id,omitempty"`
	Since      time.Time `json:"since"`
}

// InstanceInfo is one instance in HostStatus.
type InstanceInfo struct {
	ID         string `json:"id"`
	DecisionID string `json:"decision_id"`
	Package    string `json:"package"`
	Version    string `json:"version"`
	Variant    string `json:"variant"`
	Role       string `json:"role,omitempty"`
	Runtime    string `json:"runtime"`
	State      string `json:"state"`
	// Since is when the instance entered State.
	Since time.Time `json:"since,omitzero"`
	// Reason is why it is unhealthy, restarting or failed (a ctl.Reason*
	// code).
	Reason   string `json:"reason,omitempty"`
	Restarts int    `json:"restarts"`
	Endpoint string `json:"endpoint,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// Status returns in-flight decisions, instances and departed instances,
// each sorted (in-flight by start time, instances by id).
func (h *Host) Status() HostStatus {
	h.mu.Lock()
	st := HostStatus{Enabled: h.cfg.Enabled, InFlight: h.inflightLocked(), Departed: slices.Clone(h.departed)}
	if h.iso != nil {
		sup := h.iso.Support()
		st.Isolation = &sup
	}
	insts := h.sortedInstancesLocked()
	h.mu.Unlock()
	for _, in := range insts {
		snap := in.snapshot()
		ep, _ := in.managed.Endpoint()
		st.Instances = append(st.Instances, InstanceInfo{
			ID: in.id, DecisionID: in.decision, Package: in.pkgID, Version: in.version, Variant: in.variant,
			Role: in.role, Runtime: string(in.kind), State: snap.state, Since: snap.since, Reason: snap.reason, Restarts: snap.restarts,
			Endpoint: ep, Detail: snap.detail,
		})
	}
	return st
}

func (h *Host) inflightLocked() []InFlightStatus {
	out := make([]InFlightStatus, 0, len(h.inflight))
	for _, f := range h.inflight {
		out = append(out, InFlightStatus{DecisionID: f.decision, Package: f.pkgID, Version: f.version,
			InstanceID: f.instanceID, Since: f.since})
	}
	slices.SortFunc(out, func(a, b InFlightStatus) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.DecisionID, b.DecisionID)
	})
	return out
}

func (h *Host) sortedInstancesLocked() []*instance {
	out := slices.Collect(maps.Values(h.insts))
	slices.SortFunc(out, func(a, b *instance) int { return strings.Compare(a.id, b.id) })
	return out
}

func (h *Host) instanceCount() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return float64(len(h.insts))
}

// record writes one chain record with source AuditSource.
func (h *Host) record(kind string, payload any) error {
	if err := h.audit.Record(AuditSource, kind, payload); err != nil {
		h.met.auditFailures.Inc()
		h.log.Error("chain record", zap.String("kind", kind), zap.Error(err))
		return fmt.Errorf("chain %s: %w", kind, err)
	}
	return nil
}

// recordRepeatable hands a record its sender can repeat at will to the
// Recorder with source AuditSource, keyed by sender (the authenticated
// peer), kind and reason (a fixed code), in the class of its reason
// (recordClass). It chains the first of a key per period and counts the
// rest.
func (h *Host) recordRepeatable(sender, kind, reason string, payload any) {
	key := chain.RecordKey{Class: recordClass(reason), Sender: sender, Kind: kind, Reason: reason}
	if _, err := h.rec.Record(key, AuditSource, payload); err != nil {
		h.met.auditFailures.Inc()
		h.log.Error("chain record", zap.String("kind", kind), zap.Error(err))
	}
}
