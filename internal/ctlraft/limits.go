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
	// FirstBootWait is the heartbeat and election timeout of a voter
	// starting a new cluster with no state file to import, until it first
	// sees a leader: the voter that holds the state file of the controller
	// that ran alone (raftmesh's timeouts, under a second) stands first and
	// leads, so that it imports the file before anything else is written.
	FirstBootWait = 2 * time.Second
	// statsEvery is how often Run refreshes the log-size gauges.
	statsEvery = time.Second
)
