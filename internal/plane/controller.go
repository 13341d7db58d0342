package plane

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/pkg"
	"go.uber.org/zap"
)

// ChainSource is the source of the controller's chain entries.
const ChainSource = "plane"

// Chain entry kinds of the controller.
const (
	KindDecision  = "plane.decision"
	KindRefuse    = "plane.refuse"
	KindDispatch  = "plane.dispatch"
	KindPlaced    = "plane.placed"
	KindAdopted   = "plane.adopted"
	KindLifecycle = "plane.lifecycle"
	KindAlert     = "plane.alert"
	KindMigrate   = "plane.migrate"
	KindOrphan    = "plane.orphan"
	// KindInstance is an operator's stop or unload through the
	// controller (Stop, Unload), chained before the call.
	KindInstance = "plane.instance"
)

// ErrNoPackage is wrapped by Place when the package cannot be verified.
var ErrNoPackage = errors.New("package not placeable")

// Controller is the placement controller. See the package doc. It is
// the exported face of its parts, which share one core (the in-memory
// state under mu):
//
//   - reconciler computes what to do from the state: the engine's view,
//     the request, governance, the notes, move caps. It does no I/O and
//     reads no clock (the time is passed in).
//   - writer is the one applier: it chains, persists and dispatches, and
//     every change of a placement's life goes through it.
//   - lifecycle is the tick: it describes the nodes and steps every
//     placement and declared workload, asking the reconciler and telling
//     the writer.
//   - readModel is the operator's view: placements, declarations, nodes,
//     recent reports.
//   - operatorVerbs are the operator's start, stop and unload.
//   - keeper keeps the placed packages.
//
// The Controller itself owns the config and targets and the loop (Run)
// that puts a reload in force.
type Controller struct {
	*core
	// pending is the config and targets Reconfigure handed over, not yet
	// applied; due (size 1) tells Run (reload.go).
	pendingMu sync.Mutex
	pending   *update
	due       chan struct{}
	// manual (Deps.ManualTicks) leaves Run's loop unstarted.
	manual bool
	// fromConfig is the node's config the controller resolves its own
	// from (NewFromConfig, daemon.go); nil for New.
	fromConfig *configured
}

// core is the controller's shared state and its parts. Each part embeds
// it; a part reaches another through its field.
type core struct {
	// cfg is replaced whole by ApplyConfig; each use loads it.
	cfg   atomic.Pointer[Config]
	now   func() time.Time
	chain Appender
	disp  Dispatcher
	// state keeps the state (Deps.State); file is it when it is the
	// state file (written whole), nil for a delta store.
	state StateStore
	file  *fileStore
	store Store
	rev   Revocations
	met   *metrics
	log   *zap.Logger

	// mu guards nodes, placements, decls and busy; never held across
	// I/O.
	mu         sync.Mutex
	nodes      map[string]*nodeState
	placements map[string]*Placement
	// decls is the progress of declared workloads, by name.
	decls map[string]*declState
	// decisions are the decision records chained since the last save,
	// for a delta store (they are replicated with the state).
	decisions []StateEntry
	// busy holds the decision ids being dispatched by a call in progress;
	// the lifecycle leaves them alone until it returns.
	busy map[string]bool
	// verbs counts the operator's starts and stops that changed a
	// placement, and the places that ended (writer.place); verbAt holds,
	// by decision id, its value after the last one of each placement, and
	// listedAt its value when the tick in progress (or the last) began to
	// describe the nodes. A placement whose verbAt is later changed after
	// its node's listing was taken: that listing is stale for it (it
	// would undo a stop, take a start for a failure, or find a new
	// instance missing), and the tick leaves it alone.
	verbs, listedAt uint64
	verbAt          map[string]uint64
	// gone holds the nodes that are not targets but that placements name,
	// with their last contact: the controller's start for a node of a
	// restored placement, the last describe of a target removed by
	// SetTargets. Their placements are lost after DeadAfter of it, like a
	// dead target's.
	gone map[string]time.Time
	// wake is set when a node became alive or a target was added: the
	// next tick ends every reschedule's and declaration's backoff
	// (wakeBackoffsLocked).
	wake bool

	// odReady holds, by decision id, when each placed on-demand instance
	// was first seen running (its residency starts then); roles holds,
	// by workload name, the role and model of each on-demand workload's
	// package (ondemand.go). Guarded by mu.
	odReady map[string]time.Time
	roles   map[string]roleInfo
	// evictedFor holds, by on-demand workload, the explanation's lines of
	// the eviction made for it, until its next decision takes them
	// (swap.go). Guarded by mu.
	evictedFor map[string][]string
	// tickNow (size 1) makes Run tick at once: a demand is placed now,
	// not at the next period.
	tickNow chan struct{}

	// lead is the leadership (leader.go).
	lead leadState

	// recent keeps the latest reports for Recent (operator.go).
	recent recentReports
	// profiles keeps the nodes' engine profiles between decisions (view).
	profiles profiles
	// placer keeps the engine's working memory between decisions.
	placer engine.Placer

	rec  *reconciler
	w    *writer
	life *lifecycle
	read *readModel
	ops  *operatorVerbs
	kp   *keeper
}

// reconciler computes what to do from the state (reconciler.go,
// governance.go, explainnotes.go, moves.go): no I/O, no clock reads.
type reconciler struct{ *core }

// writer applies decisions: it chains, persists and dispatches
// (writer.go, dispatch.go, moves.go, declview.go).
type writer struct {
	*core
	// persistMu is held across encoding and saving the state, so the
	// last save holds the latest state.
	persistMu sync.Mutex
	// delta is what the last save to a delta store held. Guarded by
	// persistMu.
	delta deltaCache
}

// lifecycle is the tick (lifecycle.go, failed.go; the declared workloads
// in reconcile.go).
type lifecycle struct {
	*core
	// tickMu serialises ticks and target changes; it is held across a
	// tick's calls on purpose (one lifecycle pass at a time). Place does
	// not take it, so a long place never holds up the lifecycle.
	tickMu sync.Mutex
}

// readModel is the operator's view of the state (operator.go,
// declview.go, facts.go).
type readModel struct{ *core }

// operatorVerbs are the operator's start, stop and unload (verbs.go).
type operatorVerbs struct{ *core }

// keeper keeps the placed packages (kept.go).
type keeper struct {
	*core
	// kept is where placed packages are kept (Deps.Placed; nil: none);
	// keptMu serialises keeping and pruning, and keeping counts the
	// manifest hashes being kept for a place not yet recorded.
	kept    PlacedStore
	keptMu  sync.Mutex
	keeping map[string]int
}

// conf returns the current config.
func (c *core) conf() *Config { return c.cfg.Load() }

// New validates cfg and targets, restores the placements of the state
// file, and returns a Controller. It starts nothing. A state file it
// refuses (ErrBadState) is left untouched.
func New(cfg Config, targets []Target, deps Deps) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("controller config: %w", err)
	}
	if deps.Chain == nil || deps.Dispatcher == nil || (deps.StatePath == "" && deps.State == nil) {
		return nil, errors.New("controller: Chain, Dispatcher and StatePath (or State) are required")
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	log := deps.Logger
	if log == nil {
		log = zap.NewNop()
	}
	k := &core{
		log: log.Named("plane"), now: now, busy: map[string]bool{}, gone: map[string]time.Time{}, chain: deps.Chain, disp: deps.Dispatcher, state: deps.State,
		nodes: map[string]*nodeState{}, placements: map[string]*Placement{}, store: deps.Store, decls: map[string]*declState{},
		rev: deps.Revocations, odReady: map[string]time.Time{}, roles: map[string]roleInfo{}, evictedFor: map[string][]string{}, tickNow: make(chan struct{}, 1),
	}
	k.rec, k.w, k.life, k.read, k.ops = &reconciler{k}, &writer{core: k}, &lifecycle{core: k}, &readModel{k}, &operatorVerbs{k}
	k.kp = &keeper{core: k, kept: deps.Placed, keeping: map[string]int{}}
	k.lead.src = deps.Leadership
	c := &Controller{core: k, due: make(chan struct{}, 1), manual: deps.ManualTicks}
	c.cfg.Store(&cfg)
	if err := c.setTargets(targets, now()); err != nil {
		return nil, err
	}
	if k.state == nil {
		k.file = &fileStore{path: deps.StatePath}
		k.state = k.file
	}
	st, err := loadFrom(context.Background(), k.state)
	if err != nil {
		return nil, err
	}
	if err := c.restore(st, true); err != nil {
		return nil, err
	}
	met, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	c.met = met
	c.w.updateGauges()
	return c, nil
}

func (c *Controller) setTargets(ts []Target, now time.Time) error {
	if err := checkTargets(ts); err != nil {
		return err
	}
	for _, t := range ts {
		c.nodes[t.ID] = &nodeState{target: t, lastContact: now}
	}
	return nil
}

// checkTargets reports every problem of a target list.
func checkTargets(ts []Target) error {
	var errs []error
	seen := map[string]bool{}
	for i, t := range ts {
		if t.ID == "" || len(t.ID) > engine.MaxTextLen || !grammar.PrintableASCII(t.ID) {
			errs = append(errs, fmt.Errorf("targets[%d]: bad node id %q", i, t.ID))
		}
		if seen[t.ID] {
			errs = append(errs, fmt.Errorf("targets[%d]: node %s given twice", i, t.ID))
		}
		seen[t.ID] = true
		switch {
		case len(t.Key) != ed25519.PublicKeySize:
			errs = append(errs, fmt.Errorf("targets[%d]: node %s has no ed25519 key", i, t.ID))
		case identity.NodeID(t.Key) != t.ID:
			errs = append(errs, fmt.Errorf("targets[%d]: node %s: its key is node %s's", i, t.ID, identity.NodeID(t.Key)))
		}
		if t.Tier < engine.TrustDiscovered || t.Tier > engine.TrustPinned {
			errs = append(errs, fmt.Errorf("targets[%d]: node %s has no tier", i, t.ID))
		}
	}
	return errors.Join(errs...)
}

// clone is a deep copy of p.
func (p *Placement) clone() Placement {
	cp := *p
	cp.Candidates = slices.Clone(p.Candidates)
	cp.Labels, cp.Excludes = slices.Clone(p.Labels), slices.Clone(p.Excludes)
	if p.Order != nil {
		o := *p.Order
		o.Prefer, o.Avoid = slices.Clone(o.Prefer), slices.Clone(o.Avoid)
		cp.Order = &o
	}
	return cp
}

// SetTargets replaces the targets (a config reload). A target whose key is
// unchanged keeps its cached facts and liveness; a new or re-keyed one
// starts unheard from now. Placements on a node no longer a target are
// kept; it is not described any more, so they are lost once DeadAfter
// has passed since its last contact, and move (their status says why),
// unless it is a target again by then.
func (c *Controller) SetTargets(ts []Target) error {
	c.life.tickMu.Lock()
	defer c.life.tickMu.Unlock()
	return c.replaceTargets(ts)
}

// replaceTargets is SetTargets; the caller holds tickMu.
func (c *Controller) replaceTargets(ts []Target) error {
	if err := checkTargets(ts); err != nil {
		return err
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes := make(map[string]*nodeState, len(ts))
	for _, t := range ts {
		if old, ok := c.nodes[t.ID]; ok && old.target.Key.Equal(t.Key) {
			old.target = t
			nodes[t.ID] = old
			continue
		}
		nodes[t.ID] = &nodeState{target: t, lastContact: now}
		c.wake = true // a new target: room for what waits
	}
	for id, old := range c.nodes {
		if _, still := nodes[id]; !still {
			if _, ok := c.gone[id]; !ok {
				c.gone[id] = old.lastContact
			}
		}
	}
	for id := range nodes {
		delete(c.gone, id)
	}
	c.nodes = nodes
	return nil
}

// ApplyConfig validates cfg and applies it from the next operation on
// (Run's ticker takes a new tick at once); on error the old config stays.
func (c *Controller) ApplyConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("controller config: %w", err)
	}
	c.cfg.Store(&cfg)
	c.wakeRun()
	return nil
}

// Attempt is one place call of a decision.
type Attempt struct {
	Node    string
	Variant string
	// Outcome is placed, refused, unreachable, indeterminate, adopted or
	// error.
	Outcome string
	Code    ctl.Code
	Reason  string
}

// Report is the result of Place.
type Report struct {
	DecisionID string
	Decision   engine.Decision
	Attempts   []Attempt
	// Placed is the placement made, nil if none (dry run, unplaceable,
	// every candidate refused, or unsettled: see Unsettled).
	Placed *Placement
	// Unsettled is true when a place went without an answer and the node
	// could not say whether it holds the instance: nothing else is tried
	// until a later tick settles it.
	Unsettled bool
	// Governance is the policy's reason when governance, not the engine,
	// placed nothing (governance.go); "" otherwise.
	Governance string
	// Notes are the lines Explain adds after the engine's explanation
	// (explainnotes.go): prefer and avoid, the affinity that chose, the
	// measured perf figures, the tie-break rule.
	Notes []string
}

// decisionRecord is the payload of KindDecision.
type decisionRecord struct {
	Workload     string   `json:"workload"`
	Kind         string   `json:"kind"`
	Package      string   `json:"package"`
	Version      string   `json:"version"`
	ManifestHash string   `json:"manifest_hash"`
	DryRun       bool     `json:"dry_run"`
	Reason       string   `json:"reason"`
	Replaces     string   `json:"replaces,omitempty"`
	Supersedes   string   `json:"supersedes,omitempty"`
	Declared     string   `json:"declared,omitempty"`
	Replica      *int     `json:"replica,omitempty"`
	CurrentNode  string   `json:"current_node,omitempty"`
	Chosen       string   `json:"chosen,omitempty"`
	Variant      string   `json:"variant,omitempty"`
	Candidates   []string `json:"candidates"`
	Rejected     []string `json:"rejected,omitempty"`
	Error        string   `json:"error,omitempty"`
	// What the explanation needs beyond the fields above (explainFields;
	// ScanDecisions reads it back): the request's pin and opt-in, the
	// choice's tier and score, and the engine's candidates (at most
	// MaxChainedCandidates; RankedOmitted counts the rest).
	Pin           string             `json:"pin,omitempty"`
	AllowEmulated bool               `json:"allow_emulated,omitempty"`
	Choice        *chainedChoice     `json:"choice,omitempty"`
	Ranked        []chainedCandidate `json:"ranked,omitempty"`
	RankedOmitted int                `json:"ranked_omitted,omitempty"`
	// Notes are the explanation's lines beyond the engine's
	// (explainnotes.go).
	Notes []string `json:"notes,omitempty"`
}

// Place places the workload of order o (see the package doc). The error
// is nil when a decision was made, whatever its outcome: Report says
// what happened.
func (c *Controller) Place(ctx context.Context, o Order) (Report, error) {
	if err := c.notLeader(); err != nil {
		return Report{}, err
	}
	p, err := c.disp.VerifyPackage(ctx, o.PackageDir)
	if err != nil {
		c.met.placements.WithLabelValues(outError).Inc()
		// The refusal is a verdict too (a revoked package names its
		// subject); it is chained, and nothing is placed either way.
		cerr := c.w.chainRefusal("place", o.Name, "", "", o.PackageDir, err, 0)
		return Report{}, errors.Join(fmt.Errorf("%w: %w", ErrNoPackage, err), cerr)
	}
	if !o.DryRun {
		// What is placed is kept: its failover places these bytes.
		kp, ko, release, err := c.kp.keep(ctx, p, o)
		if err != nil {
			c.met.placements.WithLabelValues(outError).Inc()
			m := p.Verified().Manifest
			cerr := c.w.chainRefusal("place", o.Name, m.ID, m.Version, o.PackageDir, err, 0)
			return Report{}, errors.Join(fmt.Errorf("%w: %w", ErrNoPackage, err), cerr)
		}
		defer release()
		p, o = kp, ko
	}
	return c.w.place(ctx, p, o, intent{reason: "operator"}, c.conf().PlaceTimeout)
}

// aim points pl at candidate i: node, variant, the instance id the node
// will give it, and the memory it reserves there. The caller holds mu or
// owns pl alone.
func (pl *Placement) aim(v *pkg.Verified, i int) {
	cd := pl.Candidates[i]
	pl.Cursor = i
	pl.Node, pl.Variant = cd.Node, cd.Variant
	var cfg ctl.InstanceConfig
	if pl.Order != nil {
		cfg = pl.Order.Config
	}
	pl.InstanceID = ctl.InstanceID(v.Manifest.ID, v.Manifest.Version, cd.Variant, v.ManifestHash, cfg, cd.Node)
	pl.Reserved = variantResources(v.Manifest, cd.Variant)
}

// writeDispatch writes a decision's id and its dispatch attempts, one a
// line, as Report.Explain and ScanDecisions show them.
func writeDispatch(b *strings.Builder, decisionID string, attempts []Attempt) {
	fmt.Fprintf(b, "decision_id: %s\n", decisionID)
	if len(attempts) > 0 {
		b.WriteString("dispatch:\n")
	}
	for i, a := range attempts {
		fmt.Fprintf(b, "  %d. %s via %s: %s", i+1, a.Node, a.Variant, a.Outcome)
		switch {
		case a.Code != "":
			fmt.Fprintf(b, " (%s: %s)", a.Code, a.Reason)
		case a.Reason != "":
			fmt.Fprintf(b, " (%s)", a.Reason)
		}
		b.WriteByte('\n')
	}
}

// Explain renders the report: the engine's explanation, the decision id,
// and one line per place call.
func (r Report) Explain() string {
	var b strings.Builder
	b.WriteString(r.Decision.Explain())
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
	for _, n := range r.Notes {
		b.WriteString(n + "\n")
	}
	b.WriteString(tieBreakNote + "\n")
	if r.Governance != "" {
		b.WriteString("governance: " + r.Governance + "\n")
	}
	writeDispatch(&b, r.DecisionID, r.Attempts)
	if r.Unsettled {
		b.WriteString("unsettled: the node may hold the instance; settled on a later tick\n")
	}
	return b.String()
}
