package ctlraft

import (
	"time"

	"github.com/nodeld/nodeld/internal/plane"
)

// Bounds of what an entry or a snapshot may hold, checked while decoding.
const (
	// MaxEntryBytes bounds one log entry: the import of a whole
	// controller.json (plane.MaxStateBytes) with its framing.
	MaxEntryBytes = plane.MaxStateBytes + 1<<20
	// MaxSnapshotBytes bounds a snapshot: the state (the packages and
	// placements a state file may hold) and the decision records.
	MaxSnapshotBytes = 4 * plane.MaxStateBytes
	// MaxPlacements bounds the placements of the state.
	MaxPlacements = 100_000
	// MaxRecordBytes bounds one record's encoding.
	MaxRecordBytes = 64 << 10
)

// Defaults of Config.
const (
	// DefaultApplyTimeout bounds Save's wait for a commit when its
	// context has no earlier deadline.
	DefaultApplyTimeout = 5 * time.Second
	// DefaultSnapshotThreshold: a snapshot once this many entries were
	// appended since the last (each entry is a small delta: 1,024 of them
	// are about a minute of a busy controller).
	DefaultSnapshotThreshold = 1024
	// DefaultTrailingLogs is how many entries a snapshot leaves in the
	// log, so a follower a little behind catches up without a snapshot.
	DefaultTrailingLogs = 2048
	// DefaultSnapshotInterval is how often raft checks the threshold.
	DefaultSnapshotInterval = 30 * time.Second
	// ImportedSuffix is appended to the name of a state file imported.
	ImportedSuffix = ".imported"
	// FirstBootWait is how long a voter with no raft state and no state
	// file to import waits to be contacted by a leader before it starts a
	// new cluster of the voters listed (BootstrapCluster): the controller
	// that ran alone (its raft state, or the state file of a version
	// before raft) leads at once and adds the new voters, so that nothing
	// is written before its state is in the log. A voter not yet in a
	// cluster votes for any candidate (raft's bootstrap rule), so the one
	// holding the state wins the first election.
	FirstBootWait = 2 * time.Second
	// SoloTimeout is raft's heartbeat, election and lease timeout of a
	// single controller (a one-voter cluster): there is no one to hear
	// from, so its election after a start takes SoloTimeout to twice it.
	SoloTimeout = 20 * time.Millisecond
	// statsEvery is how often Run refreshes the log-size gauges.
	statsEvery = time.Second
)
