package ctlraft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/raftmesh"
)

// Config is the replicated store's configuration.
type Config struct {
	// Self is this controller's node id (its raft server id and address).
	Self string
	// Voters are the controllers' node ids, Self among them; one voter is
	// a single controller.
	Voters []string
	// Dir is raft's directory (log and snapshots, 0700; files 0600).
	Dir string
	// ImportPath is the state file of a controller before raft
	// (controller.json): imported once, as one entry, by this controller
	// when it leads and the cluster imported none yet, then renamed with
	// ImportedSuffix. "" imports nothing.
	ImportPath string
	// Join is set for a voter that joins a cluster running already (its
	// leader adds it); unset, a voter with no raft state bootstraps the
	// cluster of Voters (every voter of a new cluster does, with the same
	// list).
	Join bool
	// ApplyTimeout bounds Save; DefaultApplyTimeout when zero.
	ApplyTimeout time.Duration
	// SnapshotThreshold, TrailingLogs and SnapshotInterval are raft's
	// (defaults DefaultSnapshotThreshold, DefaultTrailingLogs,
	// DefaultSnapshotInterval when zero).
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotInterval  time.Duration
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Self == "" {
		errs = append(errs, errors.New("ctlraft: no self"))
	}
	if !slices.Contains(c.Voters, c.Self) {
		errs = append(errs, fmt.Errorf("ctlraft: self %q is not among the voters", c.Self))
	}
	if len(c.Voters) > raftmesh.MaxVoters {
		errs = append(errs, fmt.Errorf("ctlraft: %d voters, at most %d", len(c.Voters), raftmesh.MaxVoters))
	}
	for i, v := range c.Voters {
		if v == "" || slices.Index(c.Voters, v) != i {
			errs = append(errs, fmt.Errorf("ctlraft: voter %q empty or listed twice", v))
		}
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("ctlraft: no raft directory"))
	}
	if c.ApplyTimeout < 0 || c.SnapshotInterval < 0 {
		errs = append(errs, errors.New("ctlraft: negative timeout"))
	}
	return errors.Join(errs...)
}

// Deps are the store's collaborators.
type Deps struct {
	// Layer carries raft over the mesh. Required.
	Layer *raftmesh.Layer
	// Logger is the daemon's; the store names it "ctlraft". Required.
	Logger *zap.Logger
	// Registerer receives the nodeld_ctlraft_* metrics; nil registers
	// none.
	Registerer prometheus.Registerer
	// Now is the clock of the snapshot age; time.Now when nil.
	Now func() time.Time
	// Tune, when set, changes raft's config before it starts (tests).
	Tune func(*raft.Config)
	// FirstBootWait replaces FirstBootWait when positive; negative starts
	// a new cluster without it (tests that do not import).
	FirstBootWait time.Duration
}

// Store is the controller's state in raft: plane's StateStore and
// Leadership. See the package doc.
type Store struct {
	cfg Config
	log *zap.Logger
	met *metrics
	now func() time.Time
	fsm *fsm
	// changed (size 1) tells plane the role or leader may have changed.
	changed chan struct{}
	deps    Deps

	// r is raft while Run runs it, nil before and after.
	r atomic.Pointer[raft.Raft]
	// importMu serialises the import (Barrier).
	importMu sync.Mutex
	// votersMu guards cfg.Voters, which SetVoters replaces.
	votersMu sync.Mutex
	// lastSnap is when a snapshot was last taken or restored (unix ns).
	lastSnap atomic.Int64
	// leaderSeen is the leader last observed, for the changes counter.
	// Guarded by Run's goroutine.
	leaderSeen raft.ServerID
	// solo is set for a single controller (solo.go): its state is read
	// from disk by New, plane leads without Leadership, and Save waits
	// for ready, which Run closes once raft leads and the state file is
	// imported (soloReady, guarded by Run's goroutine). importView is
	// the state with the file imported until then (Load).
	solo       bool
	ready      chan struct{}
	soloReady  bool
	importView atomic.Pointer[fsm]
}

var (
	_ plane.StateStore     = (*Store)(nil)
	_ plane.Leadership     = (*Store)(nil)
	_ plane.DecisionReader = (*Store)(nil)
)

// New validates cfg and returns a Store; it starts nothing. A single
// controller's state is read from disk here (solo.go).
func New(cfg Config, deps Deps) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Layer == nil || deps.Logger == nil {
		return nil, errors.New("ctlraft: Layer and Logger are required")
	}
	if cfg.ApplyTimeout == 0 {
		cfg.ApplyTimeout = DefaultApplyTimeout
	}
	if cfg.SnapshotThreshold == 0 {
		cfg.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if cfg.TrailingLogs == 0 {
		cfg.TrailingLogs = DefaultTrailingLogs
	}
	if cfg.SnapshotInterval == 0 {
		cfg.SnapshotInterval = DefaultSnapshotInterval
	}
	cfg.Voters = slices.Clone(cfg.Voters)
	met, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("ctlraft metrics: %w", err)
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{cfg: cfg, log: deps.Logger.Named("ctlraft"), met: met, now: now, fsm: newFSM(),
		changed: make(chan struct{}, 1), deps: deps}
	s.fsm.onApply = s.signal
	s.lastSnap.Store(now().UnixNano())
	if s.solo = len(cfg.Voters) == 1; s.solo {
		s.ready = make(chan struct{})
		if err := s.preload(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// signal tells plane (Changed) without blocking.
func (s *Store) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Run opens raft's stores, runs raft (bootstrapping a new cluster unless
// Join), follows its leadership, and shuts it down once ctx ends, handing
// the lead to another voter first when it leads. A Store runs once.
func (s *Store) Run(ctx context.Context) error {
	st, err := raftmesh.OpenStores(s.cfg.Dir, s.log)
	if err != nil {
		return err
	}
	defer st.Close()
	rc := raftmesh.LANConfig(s.cfg.Self, s.log)
	rc.SnapshotThreshold, rc.TrailingLogs, rc.SnapshotInterval = s.cfg.SnapshotThreshold, s.cfg.TrailingLogs, s.cfg.SnapshotInterval
	if s.deps.Tune != nil {
		s.deps.Tune(rc)
	}
	has, err := raft.HasExistingState(st.Log, st.Stable, st.Snapshots)
	if err != nil {
		return fmt.Errorf("raft state: %w", err)
	}
	if s.solo {
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = SoloTimeout, SoloTimeout, SoloTimeout
		rc.NoSnapshotRestoreOnStart = true // New read it (preload)
	}
	wait := FirstBootWait
	if s.deps.FirstBootWait != 0 {
		wait = s.deps.FirstBootWait
	}
	boot := !has && !s.cfg.Join
	var bootLater <-chan time.Time
	if boot && !s.solo && wait > 0 && !s.holdsImport() {
		// A new voter with nothing to import: the controller that ran
		// alone may be about to add it (FirstBootWait).
		t := time.NewTimer(wait)
		defer t.Stop()
		bootLater, boot = t.C, false
	}
	snaps := &timedSnapshots{SnapshotStore: st.Snapshots, at: func() { s.lastSnap.Store(s.now().UnixNano()) }}
	r, err := raft.NewRaft(rc, s.fsm, st.Log, st.Stable, snaps, raftmesh.NewTransport(s.deps.Layer, s.log))
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	obs := make(chan raft.Observation, 16)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	r.RegisterObserver(observer)
	s.r.Store(r)
	defer func() {
		s.votersMu.Lock()
		alone := len(s.cfg.Voters) <= 1
		s.votersMu.Unlock()
		if r.State() == raft.Leader && !alone {
			// A stop, not a crash: hand the lead over so that the others
			// need not wait for an election timeout (a rolling restart).
			if err := r.LeadershipTransfer().Error(); err != nil {
				s.log.Info("lead not handed over", zap.Error(err))
			}
		}
		s.r.Store(nil)
		r.DeregisterObserver(observer)
		if err := r.Shutdown().Error(); err != nil {
			s.log.Warn("raft shutdown", zap.Error(err))
		}
		s.met.leader.Set(0)
		s.signal()
	}()
	if boot {
		if err := s.bootstrap(r); err != nil {
			return err
		}
	}
	tick := time.NewTicker(statsEvery)
	defer tick.Stop()
	s.observe(ctx, r)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-bootLater:
			bootLater = nil
			if r.LastIndex() > 0 {
				continue // a leader reached it: it is in the cluster
			}
			if err := s.bootstrap(r); err != nil {
				return err
			}
		case <-obs:
			s.observe(ctx, r)
		case <-tick.C:
			s.observe(ctx, r)
		}
	}
}

// bootstrap starts a new cluster of the voters listed; a voter that holds
// raft state already (a leader reached it) is left as it is.
func (s *Store) bootstrap(r *raft.Raft) error {
	s.votersMu.Lock()
	voters := slices.Clone(s.cfg.Voters)
	s.votersMu.Unlock()
	servers := make([]raft.Server, len(voters))
	for i, v := range voters {
		servers[i] = raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v), Address: raft.ServerAddress(v)}
	}
	if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap raft: %w", err)
	}
	return nil
}

// observe updates the gauges and tells plane of a change of leader; a
// single controller that leads gets ready (soloLeads).
func (s *Store) observe(ctx context.Context, r *raft.Raft) {
	_, id := r.LeaderWithID()
	if id != s.leaderSeen {
		s.leaderSeen = id
		s.met.leaderChanges.Inc()
	}
	if s.solo {
		s.soloLeads(ctx, r)
	}
	s.met.term.Set(float64(r.CurrentTerm()))
	if r.State() == raft.Leader {
		s.met.leader.Set(1)
	} else {
		s.met.leader.Set(0)
	}
	stats := r.Stats()
	var last, snap uint64
	fmt.Sscan(stats["last_log_index"], &last)
	fmt.Sscan(stats["last_snapshot_index"], &snap)
	s.met.logEntries.Set(float64(last - min(snap, last)))
	s.met.snapshotAge.Set(s.now().Sub(time.Unix(0, s.lastSnap.Load())).Seconds())
	s.signal()
}

// Load returns the replica's state (plane.StateStore); a single
// controller's with its state file imported, before Run imported it.
func (s *Store) Load(context.Context) (plane.State, error) {
	if v := s.importView.Load(); v != nil {
		return v.state(), nil
	}
	return s.fsm.state(), nil
}

// Applied counts the changes applied to the replica (plane.Leadership).
func (s *Store) Applied() uint64 { return s.fsm.gen.Load() }

// Changed receives when the role or leader may have changed.
func (s *Store) Changed() <-chan struct{} { return s.changed }

// Leader returns this controller's role, the term and the leader.
func (s *Store) Leader() plane.LeaderInfo {
	r := s.r.Load()
	if r == nil {
		return plane.LeaderInfo{Role: plane.RoleShutdown}
	}
	_, id := r.LeaderWithID()
	info := plane.LeaderInfo{Term: r.CurrentTerm(), Leader: string(id)}
	switch r.State() {
	case raft.Leader:
		info.Role = plane.RoleLeader
	case raft.Candidate:
		info.Role = plane.RoleCandidate
	case raft.Follower:
		info.Role = plane.RoleFollower
	default:
		info.Role = plane.RoleShutdown
	}
	return info
}

// notLeader is the error of a call that needs the leader.
func (s *Store) notLeader(cause error) error {
	leader := ""
	if r := s.r.Load(); r != nil {
		_, id := r.LeaderWithID()
		leader = string(id)
	}
	if leader == s.cfg.Self {
		leader = ""
	}
	e := &plane.NotLeaderError{Leader: leader}
	if cause == nil {
		return e
	}
	return fmt.Errorf("%w (%w)", e, cause)
}

// Save applies ch through raft and returns once it is committed and
// applied here (plane.StateStore); off the leader it returns a
// *plane.NotLeaderError. A single controller's first Save waits for its
// raft to lead and its state file to be imported (solo.go).
func (s *Store) Save(ctx context.Context, ch plane.StateChange) error {
	data, err := encodeEntry(entryChange, &ch)
	if err != nil {
		return err
	}
	if s.solo {
		if err := s.waitSolo(ctx); err != nil {
			return err
		}
	}
	return s.apply(ctx, data)
}

// apply applies one entry and waits for it.
func (s *Store) apply(ctx context.Context, data []byte) error {
	r := s.r.Load()
	if r == nil || r.State() != raft.Leader {
		return s.notLeader(nil)
	}
	timeout := s.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	start := time.Now()
	f := r.Apply(data, timeout)
	var err error
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case <-ctx.Done():
		// The entry may still commit: the caller treats the state as
		// unknown (its next save is a reset).
		return ctx.Err()
	case err = <-done:
	}
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown):
		return s.notLeader(err)
	case err != nil:
		return fmt.Errorf("raft apply: %w", err)
	}
	s.met.save.Observe(time.Since(start).Seconds())
	s.met.stateBytes.Set(float64(len(data)))
	if rerr, ok := f.Response().(error); ok && rerr != nil {
		return rerr
	}
	return nil
}

// Barrier waits until every entry committed before is applied here; on
// the leader it first imports the state file when one waits (so a new
// leader never acts on a state without it). It fails off the leader.
func (s *Store) Barrier(ctx context.Context) error {
	r := s.r.Load()
	if r == nil || r.State() != raft.Leader {
		return s.notLeader(nil)
	}
	if err := s.wait(ctx, r.Barrier(s.cfg.ApplyTimeout)); err != nil {
		return err
	}
	if err := s.importOnce(ctx); err != nil {
		return err
	}
	return s.addVoters(ctx, r)
}

// SetVoters replaces the voters: the leader adds to
// raft's configuration the voters it lacks at once, a controller that
// leads later when it takes the lead. A voter dropped from the list is
// not removed from raft's configuration (an operator's step: a
// controller that is gone still counts towards the majority until then).
func (s *Store) SetVoters(ctx context.Context, voters []string) error {
	if s.solo && len(voters) > 1 {
		// Its timeouts are a lone voter's (SoloTimeout): far too short
		// for a cluster. controller.voters is restart-only.
		return errors.New("ctlraft: a single controller joins others by a restart with controller.voters listed")
	}
	s.votersMu.Lock()
	cfg := s.cfg
	cfg.Voters = voters
	err := cfg.Validate()
	if err == nil {
		s.cfg.Voters = slices.Clone(voters)
	}
	s.votersMu.Unlock()
	if err != nil {
		return err
	}
	r := s.r.Load()
	if r == nil || r.State() != raft.Leader {
		return nil
	}
	return s.addVoters(ctx, r)
}

// addVoters adds to raft's configuration the listed voters it lacks; r
// leads.
func (s *Store) addVoters(ctx context.Context, r *raft.Raft) error {
	f := r.GetConfiguration()
	if err := s.wait(ctx, f); err != nil {
		return err
	}
	have := map[raft.ServerID]bool{}
	for _, sv := range f.Configuration().Servers {
		have[sv.ID] = true
	}
	s.votersMu.Lock()
	voters := slices.Clone(s.cfg.Voters)
	s.votersMu.Unlock()
	for _, v := range voters {
		if have[raft.ServerID(v)] {
			continue
		}
		if err := s.wait(ctx, r.AddVoter(raft.ServerID(v), raft.ServerAddress(v), 0, s.cfg.ApplyTimeout)); err != nil {
			return fmt.Errorf("add voter %s: %w", v, err)
		}
		s.log.Info("voter added", zap.String("voter", v))
	}
	return nil
}

// wait waits for f or ctx.
func (s *Store) wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-done:
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return s.notLeader(err)
		}
		return err
	}
}

// importOnce imports the state file at ImportPath if there is one and
// the cluster imported none, then renames it with ImportedSuffix.
func (s *Store) importOnce(ctx context.Context) error {
	if s.cfg.ImportPath == "" {
		return nil
	}
	s.importMu.Lock()
	defer s.importMu.Unlock()
	ch, ok, err := plane.ImportStateFile(s.cfg.ImportPath)
	if err != nil {
		return fmt.Errorf("import %s: %w", s.cfg.ImportPath, err)
	}
	if !ok {
		return nil
	}
	if s.fsm.isImported() {
		s.log.Warn("state file not imported: the cluster imported one already", zap.String("path", s.cfg.ImportPath))
	} else {
		data, err := encodeEntry(entryImport, &ch)
		if err != nil {
			return fmt.Errorf("import %s: %w", s.cfg.ImportPath, err)
		}
		err = s.apply(ctx, data)
		switch {
		case errors.Is(err, ErrImported):
			// Another leader wrote the cluster's state first: importing
			// now would drop it. The file stays where it is for the
			// operator (docs/reliability.md).
			s.log.Error("state file not imported: the cluster holds state already; its placements are not known to the controllers",
				zap.String("path", s.cfg.ImportPath), zap.Int("placements", len(ch.Placements)))
			return nil
		case err != nil:
			return fmt.Errorf("import %s: %w", s.cfg.ImportPath, err)
		}
		s.log.Info("state file imported", zap.String("path", s.cfg.ImportPath), zap.Int("placements", len(ch.Placements)))
	}
	if err := os.Rename(s.cfg.ImportPath, s.cfg.ImportPath+ImportedSuffix); err != nil {
		return fmt.Errorf("keep imported state file: %w", err)
	}
	return nil
}

// timedSnapshots records when a snapshot is taken or opened (restored).
type timedSnapshots struct {
	raft.SnapshotStore
	at func()
}

func (t *timedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, c raft.Configuration,
	ci uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := t.SnapshotStore.Create(version, index, term, c, ci, trans)
	if err == nil {
		t.at()
	}
	return sink, err
}

// Decisions returns the decision records kept whose id starts with
// prefix, oldest first, at most limit (plane.DecisionReader).
func (s *Store) Decisions(prefix string, limit int) []plane.StateEntry {
	return s.fsm.decisionsWith(prefix, limit)
}

// holdsImport reports whether this voter holds a state file to import.
func (s *Store) holdsImport() bool {
	if s.cfg.ImportPath == "" {
		return false
	}
	_, err := os.Stat(s.cfg.ImportPath)
	return err == nil
}
