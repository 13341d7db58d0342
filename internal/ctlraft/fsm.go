package ctlraft

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/nodeld/nodeld/internal/plane"
)

// fsm is the replicated state: what plane.State holds, in maps. Apply
// is deterministic: the same entries in the same order give the same
// state on every voter, whatever each one's clock or disk.
type fsm struct {
	// mu guards the fields below.
	mu         sync.Mutex
	packages   map[string]json.RawMessage
	refs       map[string]int // placements naming each package
	placements map[string]plane.StateEntry
	decls      json.RawMessage
	// decisions are the last plane.MaxReplicaDecisions records, oldest
	// first.
	decisions []plane.StateEntry
	imported  bool
	// skipThrough is the last command a single controller's New read
	// from disk into the state (solo.go): raft applies those entries
	// again once it leads, and they are skipped. applied is the index of
	// the last command raft handed to Apply.
	skipThrough, applied uint64

	// gen counts the entries applied and snapshots restored: a reader
	// whose copy is of an older gen reads again.
	gen atomic.Uint64
	// onApply, when set, is called after each entry applied (outside
	// mu): the store's change signal.
	onApply func()
}

var _ raft.FSM = (*fsm)(nil)

func newFSM() *fsm {
	return &fsm{packages: map[string]json.RawMessage{}, refs: map[string]int{}, placements: map[string]plane.StateEntry{}}
}

// Apply applies one entry. Its result is nil, or the error that refused
// it (a malformed entry, an import after another) and changed nothing.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		f.gen.Add(1)
		return nil
	}
	f.mu.Lock()
	f.applied = l.Index
	skip := f.skipThrough > 0 && l.Index <= f.skipThrough
	f.mu.Unlock()
	if skip {
		return nil // in the state since New read it from disk
	}
	defer f.gen.Add(1)
	kind, ch, err := decodeEntry(l.Data)
	if err != nil {
		return err
	}
	f.mu.Lock()
	err = f.applyLocked(kind, &ch)
	f.mu.Unlock()
	if f.onApply != nil {
		f.onApply()
	}
	return err
}

// applyLocked applies a checked change; it checks first what needs the
// state (each placement's package is held, the import is the first) and
// changes nothing when that fails.
func (f *fsm) applyLocked(kind byte, ch *plane.StateChange) error {
	if kind == entryImport && (f.imported || !f.emptyLocked()) {
		// Imported once, or the cluster holds state already (another
		// leader wrote first): an import would drop it.
		return ErrImported
	}
	put := make(map[string]bool, len(ch.Packages))
	for _, e := range ch.Packages {
		put[e.Key] = true
	}
	for _, e := range ch.Placements {
		if !put[e.Ref] && (ch.Reset || f.packages[e.Ref] == nil) {
			return fmt.Errorf("%w: placement %s: no package %s", ErrEntry, e.Key, e.Ref)
		}
	}
	if !ch.Reset {
		for _, k := range ch.Removed {
			if _, ok := f.placements[k]; !ok {
				return fmt.Errorf("%w: removed placement %s is not held", ErrEntry, k)
			}
		}
		if n := len(f.placements) + len(ch.Placements); n > MaxPlacements {
			return fmt.Errorf("%w: %d placements, at most %d", ErrEntry, n, MaxPlacements)
		}
	}
	if ch.Reset {
		clear(f.packages)
		clear(f.refs)
		clear(f.placements)
		f.decls = nil
	}
	touched := map[string]bool{}
	for _, e := range ch.Packages {
		f.packages[e.Key] = e.Data
		touched[e.Key] = true
	}
	for _, e := range ch.Placements {
		if old, ok := f.placements[e.Key]; ok {
			f.refs[old.Ref]--
			touched[old.Ref] = true
		}
		f.placements[e.Key] = e
		f.refs[e.Ref]++
	}
	for _, k := range ch.Removed {
		if old, ok := f.placements[k]; ok {
			f.refs[old.Ref]--
			touched[old.Ref] = true
			delete(f.placements, k)
		}
	}
	for k := range touched {
		if f.refs[k] <= 0 {
			delete(f.refs, k)
			delete(f.packages, k)
		}
	}
	if ch.Declarations != nil {
		f.decls = ch.Declarations
	}
	f.decisions = appendDecisions(f.decisions, ch.Decisions)
	if kind == entryImport {
		f.imported = true
	}
	return nil
}

// appendDecisions appends to the decisions kept, dropping the oldest
// beyond plane.MaxReplicaDecisions.
func appendDecisions(have, add []plane.StateEntry) []plane.StateEntry {
	have = append(have, add...)
	if over := len(have) - plane.MaxReplicaDecisions; over > 0 {
		have = slices.Delete(have, 0, over)
	}
	return have
}

// state copies the state out, entries sorted by key.
func (f *fsm) state() plane.State {
	f.mu.Lock()
	st := plane.State{
		Packages:     make([]plane.StateEntry, 0, len(f.packages)),
		Placements:   make([]plane.StateEntry, 0, len(f.placements)),
		Declarations: f.decls,
		Decisions:    slices.Clone(f.decisions),
	}
	for k, d := range f.packages {
		st.Packages = append(st.Packages, plane.StateEntry{Key: k, Data: d})
	}
	for _, e := range f.placements {
		st.Placements = append(st.Placements, e)
	}
	f.mu.Unlock()
	byKey := func(a, b plane.StateEntry) int { return strings.Compare(a.Key, b.Key) }
	slices.SortFunc(st.Packages, byKey)
	slices.SortFunc(st.Placements, byKey)
	return st
}

// emptyLocked reports whether the state holds nothing (no placement,
// declaration or decision record; packages go with placements). f.mu is
// held.
func (f *fsm) emptyLocked() bool {
	return len(f.placements) == 0 && f.decls == nil && len(f.decisions) == 0
}

// isEmpty is emptyLocked for a caller without f.mu.
func (f *fsm) isEmpty() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.emptyLocked()
}

// isImported reports whether a state file was imported.
func (f *fsm) isImported() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.imported
}

// snapshotVersion is the snapshot format's version.
const snapshotVersion = 1

// snapshotDoc is a snapshot: the whole state.
type snapshotDoc struct {
	Version      int                `json:"version"`
	Imported     bool               `json:"imported,omitempty"`
	Packages     []plane.StateEntry `json:"packages"`
	Placements   []plane.StateEntry `json:"placements"`
	Declarations json.RawMessage    `json:"declarations,omitempty"`
	Decisions    []plane.StateEntry `json:"decisions,omitempty"`
}

// Snapshot copies the state (the records are shared: they are never
// changed in place); Persist encodes it off raft's apply goroutine.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	replaying := f.applied < f.skipThrough
	f.mu.Unlock()
	if replaying {
		// The state holds entries past the index raft would give this
		// snapshot: restoring it would apply them twice.
		return nil, errReplaying
	}
	st := f.state()
	return &snapshot{doc: snapshotDoc{Version: snapshotVersion, Imported: f.isImported(), Packages: st.Packages,
		Placements: st.Placements, Declarations: st.Declarations, Decisions: st.Decisions}}, nil
}

// Restore replaces the state with a snapshot's; a snapshot it refuses
// changes nothing.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, MaxSnapshotBytes+1))
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	doc, err := decodeSnapshot(data)
	if err != nil {
		return err
	}
	nf := newFSM()
	ch := plane.StateChange{Reset: true, Packages: doc.Packages, Placements: doc.Placements, Declarations: doc.Declarations}
	if err := nf.applyLocked(entryChange, &ch); err != nil {
		return err
	}
	f.mu.Lock()
	f.packages, f.refs, f.placements, f.decls = nf.packages, nf.refs, nf.placements, nf.decls
	f.decisions = appendDecisions(nil, doc.Decisions)
	f.imported = doc.Imported
	f.skipThrough = 0 // the entries after the snapshot are applied anew
	f.mu.Unlock()
	f.gen.Add(1)
	if f.onApply != nil {
		f.onApply()
	}
	return nil
}

// decodeSnapshot decodes and checks a snapshot.
func decodeSnapshot(data []byte) (snapshotDoc, error) {
	if len(data) > MaxSnapshotBytes {
		return snapshotDoc{}, fmt.Errorf("%w: snapshot larger than %d bytes", ErrEntry, MaxSnapshotBytes)
	}
	var doc snapshotDoc
	if err := decodeStrict(data, &doc); err != nil {
		return snapshotDoc{}, fmt.Errorf("%w: snapshot: %w", ErrEntry, err)
	}
	if doc.Version != snapshotVersion {
		return snapshotDoc{}, fmt.Errorf("%w: snapshot version %d, want %d", ErrEntry, doc.Version, snapshotVersion)
	}
	ch := plane.StateChange{Reset: true, Packages: doc.Packages, Placements: doc.Placements, Declarations: doc.Declarations}
	if len(doc.Decisions) > plane.MaxReplicaDecisions {
		return snapshotDoc{}, fmt.Errorf("%w: %d decisions, at most %d", ErrEntry, len(doc.Decisions), plane.MaxReplicaDecisions)
	}
	ch.Decisions = doc.Decisions
	if err := checkChange(&ch); err != nil {
		return snapshotDoc{}, err
	}
	return doc, nil
}

// snapshot is a state copied for Persist.
type snapshot struct{ doc snapshotDoc }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	enc := json.NewEncoder(sink)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&s.doc); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

func (*snapshot) Release() {}

// decisionsWith returns the decisions whose key starts with prefix,
// oldest first, at most limit.
func (f *fsm) decisionsWith(prefix string, limit int) []plane.StateEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []plane.StateEntry
	for _, e := range f.decisions {
		if strings.HasPrefix(e.Key, prefix) {
			out = append(out, e)
			if len(out) >= limit {
				break
			}
		}
	}
	return out
}
