package plane

// The state store seam: where the controller's state goes (Deps.State).
// The default is controller.json, written whole (fileStore); a replicated
// store (internal/ctlraft) takes changes instead: each placement, package
// and decision record that changed, by key, encoded here.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// StateStore keeps the controller's state. New loads it once; every
// change of the state is saved before what depends on it is done (a
// placement is saved before it is dispatched).
type StateStore interface {
	// Load returns the state saved, a zero State when there is none. An
	// error stops New.
	Load(ctx context.Context) (State, error)
	// Save makes change durable and returns once it is (for a replicated
	// store: committed by a majority and applied). On an error what is
	// durable is unknown: the next change is a Reset.
	Save(ctx context.Context, change StateChange) error
}

// StateEntry is one keyed record of the state: a package (Key is its
// PackageKey), a placement (Key is its decision id, Ref its package's
// key) or a decision (Key is its id). Data is its JSON encoding, which
// only this package reads.
type StateEntry struct {
	Key  string          `json:"k"`
	Ref  string          `json:"r,omitempty"`
	Data json.RawMessage `json:"d"`
}

// StateChange is what one save changes. Placements are put (added or
// replaced) by decision id and Removed are taken out; a package is put
// when a placement put names it and the store may not hold it, and a
// store drops a package no placement names any more. Declarations, when
// not nil, replaces the declarations' progress whole (it is small: one
// record a declared workload). Decisions are the records of the
// decisions made since the last save, kept by the store for Explain (the
// last MaxReplicaDecisions). A Reset change holds the whole state: the
// store drops what it held first (its decisions excepted).
type StateChange struct {
	Reset        bool            `json:"reset,omitempty"`
	Packages     []StateEntry    `json:"packages,omitempty"`
	Placements   []StateEntry    `json:"placements,omitempty"`
	Removed      []string        `json:"removed,omitempty"`
	Declarations json.RawMessage `json:"declarations,omitempty"`
	Decisions    []StateEntry    `json:"decisions,omitempty"`
}

// Empty reports whether the change changes nothing.
func (c *StateChange) Empty() bool {
	return !c.Reset && len(c.Packages)+len(c.Placements)+len(c.Removed)+len(c.Decisions) == 0 && c.Declarations == nil
}

// State is the whole state as a store holds it: entries sorted by key,
// decisions oldest first.
type State struct {
	Packages     []StateEntry
	Placements   []StateEntry
	Declarations json.RawMessage
	Decisions    []StateEntry
	// file is the decoded controller.json of the file store.
	file *stateFile
}

// MaxReplicaDecisions is how many decision records a store keeps for
// Explain on a controller that did not make them.
const MaxReplicaDecisions = 4096

// deltaPlacement is a placement as a change carries it: a version 2
// file's placement whose package is named by key (StateEntry.Ref), its
// reservation always its own.
type deltaPlacement = statePlacement

// PackageKey names a package record: the hex SHA-256 (first 16 bytes)
// of its encoding.
func PackageKey(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:16])
}

// decisionData is a decision as a store keeps it.
type decisionData struct {
	Time   string          `json:"time"`
	Record json.RawMessage `json:"record"`
}

// deltaCache is what the writer last saved to a delta store, to tell
// what changed. Guarded by writer.persistMu.
type deltaCache struct {
	m map[string]*deltaEntry
	// pkgs counts the saved placements of each package key.
	pkgs  map[string]int
	decls []byte
	// keys holds each package's key and encoding, by what names it.
	keys map[pkgIdent]pkgRecord
	gen  uint64
	// stale is set after a failed save (and before the first): the
	// next change is a Reset.
	stale bool
}

// pkgIdent is what tells packages apart (as encodeState does).
type pkgIdent struct{ id, version, kind, hash, labels string }

func identOf(p *Placement) pkgIdent {
	id := pkgIdent{p.Package, p.Version, p.Kind, p.ManifestHash, ""}
	if len(p.Labels)+len(p.Excludes) > 0 {
		id.labels = strings.Join(p.Labels, "\x00") + "\x01" + strings.Join(p.Excludes, "\x00")
	}
	return id
}

type pkgRecord struct {
	key  string
	data []byte
}

// packageOf returns the key and encoding of the package id names,
// encoded once.
func (c *deltaCache) packageOf(id pkgIdent, p *Placement) (pkgRecord, error) {
	if r, ok := c.keys[id]; ok {
		return r, nil
	}
	pb, err := json.Marshal(statePackage{ID: p.Package, Version: p.Version, Kind: p.Kind, ManifestHash: p.ManifestHash,
		Labels: p.Labels, Excludes: p.Excludes})
	if err != nil {
		return pkgRecord{}, fmt.Errorf("encode package: %w", err)
	}
	if c.keys == nil {
		c.keys = map[pkgIdent]pkgRecord{}
	}
	r := pkgRecord{key: PackageKey(pb), data: pb}
	c.keys[id] = r
	return r, nil
}

type deltaEntry struct {
	// prev is the placement as last saved (a shallow copy: its slices
	// and order are replaced, never changed in place).
	prev Placement
	pkg  pkgRecord
	gen  uint64
}

// samePlacement reports whether a and b encode the same: every field
// but OnDemand (derived, never saved); Order by pointer (replaced, never
// changed in place), the slices by value.
// TestDeltaMatchesFullState changes each field in turn.
func samePlacement(a, b *Placement) bool {
	return a.DecisionID == b.DecisionID && a.Kind == b.Kind && a.Workload == b.Workload && a.Package == b.Package &&
		a.Version == b.Version && a.ManifestHash == b.ManifestHash && a.Cursor == b.Cursor && a.Node == b.Node &&
		a.Variant == b.Variant && a.InstanceID == b.InstanceID && a.Reserved == b.Reserved && a.PlacedAt.Equal(b.PlacedAt) &&
		a.Life == b.Life && a.HostState == b.HostState && a.Order == b.Order && a.Capped == b.Capped &&
		a.Attempts == b.Attempts && a.NextAttempt.Equal(b.NextAttempt) && a.LastError == b.LastError &&
		a.WasRunning == b.WasRunning && a.LostReason == b.LostReason && a.ReplacedBy == b.ReplacedBy &&
		a.Replaces == b.Replaces && a.Declared == b.Declared && a.Replica == b.Replica && a.Supersedes == b.Supersedes &&
		a.Stopped == b.Stopped && a.RetireReason == b.RetireReason && a.FailedSince.Equal(b.FailedSince) &&
		slices.Equal(a.Candidates, b.Candidates) && slices.EqualFunc(a.Moves, b.Moves, time.Time.Equal) &&
		slices.Equal(a.Labels, b.Labels) && slices.Equal(a.Excludes, b.Excludes)
}

// scanLocked compares placements with what c last saved and returns
// copies of those that changed (every one for a Reset) and the ids of
// those gone; a placement that did not change costs a map lookup and a
// comparison, no copy. The caller holds the controller's mu (and
// persistMu); build then encodes outside mu.
func (c *deltaCache) scanLocked(placements map[string]*Placement) (changed []Placement, removed []string, reset bool) {
	if c.m == nil || c.stale {
		reset = true
		c.m, c.pkgs, c.decls, c.stale = make(map[string]*deltaEntry, len(placements)), map[string]int{}, nil, false
	}
	c.gen++
	for id, p := range placements {
		if e := c.m[id]; e != nil && samePlacement(&e.prev, p) {
			e.gen = c.gen
			continue
		}
		changed = append(changed, *p)
	}
	if len(c.m) > len(placements)-len(changed) {
		for id, e := range c.m {
			if e.gen != c.gen && placements[id] == nil {
				removed = append(removed, id)
			}
		}
	}
	return changed, removed, reset
}

// build encodes what scanLocked found, with the declarations ds and the
// decisions decs, as a change, and records it as saved: the caller marks
// c stale when the save fails.
func (c *deltaCache) build(changed []Placement, removed []string, reset bool, ds []*declState, decs []StateEntry) (StateChange, error) {
	ch := StateChange{Reset: reset, Removed: removed}
	fail := func(err error) (StateChange, error) {
		c.stale = true
		return StateChange{}, err
	}
	sent := map[string]bool{}
	for i := range changed {
		p := &changed[i]
		pr, err := c.packageOf(identOf(p), p)
		if err != nil {
			return fail(err)
		}
		sp := toStatePlacement(p, nil, 0)
		b, err := json.Marshal(&sp)
		if err != nil {
			return fail(fmt.Errorf("encode placement: %w", err))
		}
		e := c.m[p.DecisionID]
		isNew := e == nil || e.pkg.key != pr.key
		switch {
		case e == nil:
			e = &deltaEntry{}
			c.m[p.DecisionID] = e
		case e.pkg.key != pr.key:
			c.pkgs[e.pkg.key]--
		}
		if isNew {
			if (c.pkgs[pr.key] == 0 || reset) && !sent[pr.key] {
				ch.Packages = append(ch.Packages, StateEntry{Key: pr.key, Data: pr.data})
				sent[pr.key] = true
			}
			c.pkgs[pr.key]++
		}
		*e = deltaEntry{prev: *p, pkg: pr, gen: c.gen}
		ch.Placements = append(ch.Placements, StateEntry{Key: p.DecisionID, Ref: pr.key, Data: b})
	}
	for _, id := range removed {
		if e := c.m[id]; e != nil {
			c.pkgs[e.pkg.key]--
			if c.pkgs[e.pkg.key] <= 0 {
				delete(c.pkgs, e.pkg.key)
			}
			delete(c.m, id)
		}
	}
	if len(c.keys) > 4*len(c.m)+64 {
		c.keys = nil // forget the packages no longer placed, now and then
	}
	ds = slices.Clone(ds)
	slices.SortFunc(ds, func(a, b *declState) int { return strings.Compare(a.Name, b.Name) })
	if ds == nil {
		ds = []*declState{}
	}
	db, err := json.Marshal(ds)
	if err != nil {
		return fail(fmt.Errorf("encode declarations: %w", err))
	}
	if reset || !bytes.Equal(db, c.decls) {
		ch.Declarations = db
		c.decls = db
	}
	ch.Decisions = decs
	sortEntries(ch.Packages)
	sortEntries(ch.Placements)
	slices.Sort(ch.Removed)
	return ch, nil
}

// change is the change from what c last saved to ps and ds (scanLocked
// and build over a list).
func (c *deltaCache) change(ps []*Placement, ds []*declState, decs []StateEntry) (StateChange, error) {
	m := make(map[string]*Placement, len(ps))
	for _, p := range ps {
		m[p.DecisionID] = p
	}
	changed, removed, reset := c.scanLocked(m)
	return c.build(changed, removed, reset, ds, decs)
}

func sortEntries(es []StateEntry) {
	slices.SortFunc(es, func(a, b StateEntry) int { return strings.Compare(a.Key, b.Key) })
}

// decodeRecords decodes a store's state into a state file's content,
// checking it as a file's is.
func decodeRecords(st State) (stateFile, error) {
	pkgs := make(map[string]statePackage, len(st.Packages))
	for _, e := range st.Packages {
		var pk statePackage
		if err := decodeStrict(e.Data, &pk); err != nil {
			return stateFile{}, fmt.Errorf("package %s: %w", e.Key, err)
		}
		pkgs[e.Key] = pk
	}
	out := stateFile{Version: StateVersion, Placements: make([]*Placement, 0, len(st.Placements))}
	seen := make(map[string]bool, len(st.Placements))
	for _, e := range st.Placements {
		pk, ok := pkgs[e.Ref]
		if !ok {
			return stateFile{}, fmt.Errorf("placement %s: no package %s", e.Key, e.Ref)
		}
		var sp deltaPlacement
		if err := decodeStrict(e.Data, &sp); err != nil {
			return stateFile{}, fmt.Errorf("placement %s: %w", e.Key, err)
		}
		if sp.DecisionID != e.Key {
			return stateFile{}, fmt.Errorf("placement %s holds decision %s", e.Key, sp.DecisionID)
		}
		sp.Package = 0
		f := stateFileV2{Packages: []statePackage{pk}, Placements: []statePlacement{sp}}
		ps, err := f.placements()
		if err != nil {
			return stateFile{}, err
		}
		p := ps[0]
		if err := p.check(); err != nil {
			return stateFile{}, fmt.Errorf("placement %s: %w", e.Key, err)
		}
		if seen[p.DecisionID] {
			return stateFile{}, fmt.Errorf("placement %s twice", e.Key)
		}
		seen[p.DecisionID] = true
		out.Placements = append(out.Placements, p)
	}
	if len(st.Declarations) > 0 {
		if err := decodeStrict(st.Declarations, &out.Declarations); err != nil {
			return stateFile{}, fmt.Errorf("declarations: %w", err)
		}
	}
	names := map[string]bool{}
	for i, d := range out.Declarations {
		if err := d.check(); err != nil {
			return stateFile{}, fmt.Errorf("declarations[%d]: %w", i, err)
		}
		if names[d.Name] {
			return stateFile{}, fmt.Errorf("declarations[%d]: %s twice", i, d.Name)
		}
		names[d.Name] = true
	}
	return out, nil
}

// CheckState decodes st as New would and reports what it refuses; a
// store checks what it is handed with it (fuzzing, import).
func CheckState(st State) error {
	_, err := decodeRecords(st)
	return err
}

// ImportStateFile reads the controller.json at path as New would and
// returns it as a Reset change, for a store to import; ok is false when
// there is no file.
func ImportStateFile(path string) (ch StateChange, ok bool, err error) {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return StateChange{}, false, nil
	}
	st, err := loadState(path)
	if err != nil {
		return StateChange{}, false, err
	}
	var c deltaCache
	ch, err = c.change(st.Placements, st.Declarations, nil)
	if err != nil {
		return StateChange{}, false, err
	}
	return ch, true, nil
}

// fileStore is the default store: controller.json at path, written whole
// and atomically (writeState) on every save.
type fileStore struct {
	path string
	// written is the file's content as this controller last wrote it;
	// save does not write the same bytes again (a tick that changed
	// nothing, the second persist of a place). enc keeps the placements'
	// encodings between saves. Both guarded by writer.persistMu.
	written []byte
	enc     encodeCache
}

// Load reads the state file; a missing file is an empty state.
func (f *fileStore) Load(context.Context) (State, error) {
	st, err := loadState(f.path)
	if err != nil {
		return State{}, err
	}
	return State{file: &st}, nil
}

// Save is not used: the writer hands the file store its whole state
// (save).
func (f *fileStore) Save(context.Context, StateChange) error {
	return errors.New("the state file is written whole")
}

// save writes the state file unless it holds these bytes already.
func (f *fileStore) save(ps []*Placement, ds []*declState) error {
	data, err := encodeState(ps, ds, &f.enc)
	if err != nil {
		return err
	}
	if bytes.Equal(data, f.written) {
		return nil
	}
	if err := writeState(f.path, data); err != nil {
		// What is on disk is unknown: the next save writes.
		f.written = nil
		return err
	}
	f.written = data
	return nil
}

// loadFrom returns the state file content of what store holds.
func loadFrom(ctx context.Context, store StateStore) (stateFile, error) {
	st, err := store.Load(ctx)
	if err != nil {
		return stateFile{}, err
	}
	if st.file != nil {
		return *st.file, nil
	}
	sf, err := decodeRecords(st)
	if err != nil {
		return stateFile{}, fmt.Errorf("%w: %w", ErrBadState, err)
	}
	return sf, nil
}

// decisionEntry is a chained decision as a change carries it.
func decisionEntry(id string, at time.Time, rec decisionRecord) (StateEntry, error) {
	rb, err := json.Marshal(rec)
	if err != nil {
		return StateEntry{}, err
	}
	b, err := json.Marshal(decisionData{Time: at.UTC().Format(time.RFC3339Nano), Record: rb})
	if err != nil {
		return StateEntry{}, err
	}
	return StateEntry{Key: id, Data: b}, nil
}

// DecisionReader is a store that keeps the decision records replicated
// with the state (*ctlraft.Store): ReplicaDecisions reads them.
type DecisionReader interface {
	// Decisions returns the records whose key starts with prefix, oldest
	// first, at most limit.
	Decisions(prefix string, limit int) []StateEntry
}

// ReplicaDecisions explains the decisions whose id starts with prefix
// from the records dr keeps (the last MaxReplicaDecisions of the
// cluster, whichever controller made them), at most MaxChainedMatches:
// `ctl explain` on a controller whose own chain does not hold the
// decision.
func ReplicaDecisions(dr DecisionReader, prefix string) []ChainedDecision {
	var out []ChainedDecision
	for _, e := range dr.Decisions(prefix, MaxChainedMatches) {
		var d decisionData
		var rec decisionRecord
		if json.Unmarshal(e.Data, &d) != nil || json.Unmarshal(d.Record, &rec) != nil {
			continue
		}
		var b strings.Builder
		rec.explain(&b)
		writeDispatch(&b, e.Key, nil)
		fmt.Fprintf(&b, "(from the replicated state: decided at %s)\n", d.Time)
		out = append(out, ChainedDecision{ID: e.Key, Time: d.Time, Explain: b.String()})
	}
	return out
}
