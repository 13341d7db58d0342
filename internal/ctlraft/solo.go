package ctlraft

// A single controller (Voters is Self alone) is a one-voter cluster:
// every entry in its log was committed once it was written, so New reads
// the state from disk (the newest snapshot and the log after it) before
// raft runs, and plane leads on it at once, as it did on controller.json
// (no Leadership). Raft, started with NoSnapshotRestoreOnStart, applies
// those entries again once it leads: the FSM skips them (skipThrough).
// Save waits for that election (SoloTimeout) and for the import of a
// state file, which New already shows Load.

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/raftmesh"
)

// preload reads a single controller's state from its raft directory into
// the FSM, and the state file to import (if any) into importView. It
// refuses a raft state whose configuration holds other voters: one
// controller cannot lead them (they were dropped from controller.voters).
func (s *Store) preload() error {
	st, err := raftmesh.OpenStores(s.cfg.Dir, s.log)
	if err != nil {
		return err
	}
	defer st.Close()
	var from uint64
	var conf raft.Configuration
	metas, err := st.Snapshots.List()
	if err != nil {
		return fmt.Errorf("raft snapshots: %w", err)
	}
	if len(metas) > 0 {
		// Raft takes the newest as restored (NoSnapshotRestoreOnStart):
		// it must be the one read.
		meta, rc, err := st.Snapshots.Open(metas[0].ID)
		if err != nil {
			return fmt.Errorf("open raft snapshot %s: %w", metas[0].ID, err)
		}
		if err := s.fsm.Restore(rc); err != nil {
			return fmt.Errorf("raft snapshot %s: %w", meta.ID, err)
		}
		from, conf = meta.Index, meta.Configuration
	}
	first, err := st.Log.FirstIndex()
	if err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	last, err := st.Log.LastIndex()
	if err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	if last > from && first > from+1 {
		return fmt.Errorf("raft log starts at %d, after its snapshot at %d", first, from)
	}
	var lastCmd uint64
	for i := from + 1; i <= last && last > 0; i++ {
		var l raft.Log
		if err := st.Log.GetLog(i, &l); err != nil {
			return fmt.Errorf("raft log entry %d: %w", i, err)
		}
		switch l.Type {
		case raft.LogCommand:
			// An entry refused here was refused when it was applied first:
			// it changes nothing either time.
			_ = s.fsm.Apply(&l)
			lastCmd = i
		case raft.LogConfiguration:
			conf = raft.DecodeConfiguration(l.Data)
		}
	}
	for _, sv := range conf.Servers {
		if string(sv.ID) != s.cfg.Self {
			return fmt.Errorf("ctlraft: the raft state in %s is a cluster of %d controllers, but controller.voters lists none: "+
				"list the others again (a controller alone cannot lead them)", s.cfg.Dir, len(conf.Servers))
		}
	}
	s.fsm.mu.Lock()
	s.fsm.skipThrough, s.fsm.applied = lastCmd, 0
	s.fsm.mu.Unlock()
	return s.preloadImport()
}

// preloadImport checks the state file a single controller imports once
// it leads and shows its state to Load until then; a state file that
// cannot be imported stops New (it is left untouched).
func (s *Store) preloadImport() error {
	if s.cfg.ImportPath == "" || s.fsm.isImported() {
		return nil
	}
	ch, ok, err := plane.ImportStateFile(s.cfg.ImportPath)
	if err != nil {
		return fmt.Errorf("import %s: %w", s.cfg.ImportPath, err)
	}
	if !ok {
		return nil
	}
	data, err := encodeEntry(entryImport, &ch)
	if err != nil {
		return fmt.Errorf("import %s: %w", s.cfg.ImportPath, err)
	}
	if !s.fsm.isEmpty() {
		// An import goes into an empty state only: importOnce leaves the
		// file where it is and says why.
		return nil
	}
	view := newFSM()
	if res := view.Apply(&raft.Log{Type: raft.LogCommand, Data: data}); res != nil {
		return fmt.Errorf("import %s: %w", s.cfg.ImportPath, res.(error))
	}
	s.importView.Store(view)
	return nil
}

// soloLeads makes a single controller ready once raft leads: the state
// file imported (and kept aside), Save released. It runs on Run's
// goroutine; a failed import is tried again on the next observation.
func (s *Store) soloLeads(ctx context.Context, r *raft.Raft) {
	if s.soloReady || r.State() != raft.Leader {
		return
	}
	ictx, cancel := context.WithTimeout(ctx, s.cfg.ApplyTimeout)
	defer cancel()
	if err := s.importOnce(ictx); err != nil {
		s.log.Error("state file not imported yet", zap.Error(err))
		return
	}
	s.importView.Store(nil)
	s.soloReady = true
	close(s.ready)
}

// waitSolo waits until a single controller's raft leads and its state
// file is imported, at most the apply timeout.
func (s *Store) waitSolo(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	default:
	}
	t := time.NewTimer(s.cfg.ApplyTimeout)
	defer t.Stop()
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("ctlraft: the controller's raft log did not start within %s", s.cfg.ApplyTimeout)
	}
}
