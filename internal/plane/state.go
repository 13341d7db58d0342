package plane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/grammar"
)

// StateVersion is the state file version written. Version 1 files (every
// placement with its package, and its ranked candidates even once
// placed) are still read, and rewritten as version 2 at the next persist.
const StateVersion = 2

// stateVersion1 is the previous state file version, read only.
const stateVersion1 = 1

// MaxStateBytes bounds the state file.
const MaxStateBytes = 8 << 20

// StateFileMode is the state file's mode.
const StateFileMode = 0o600

// ErrBadState is wrapped by New for a state file it refuses (not a regular
// file, too large, malformed, another version). The file is left as it is.
var ErrBadState = errors.New("controller state file refused")

// stateFile is the controller's state as a state file holds it, whatever
// its version: the placements and the declarations' progress.
type stateFile struct {
	Version    int
	Placements []*Placement
	// Declarations is the progress of declared workloads beyond their
	// placements (the backoff of failed attempts).
	Declarations []*declState
}

// stateFileV1 is the document of a version 1 controller.json: each
// placement whole, as the operator reads it (Placement's JSON).
type stateFileV1 struct {
	Version      int            `json:"version"`
	Placements   []*placementV1 `json:"placements"`
	Declarations []*declState   `json:"declarations,omitempty"`
}

// placementV1 is a placement of a version 1 file: Placement's JSON with
// the lifelong move count of its time (see movesOf).
type placementV1 struct {
	Placement
	Reschedules int `json:"reschedules"`
}

// stateFileV2 is the document of a version 2 controller.json. It keeps
// what reconciliation and rescheduling need, once: each package placed is
// listed once (Packages) and placements name it by index; a placement
// keeps its ranked candidates only while its decision is not settled
// (dispatching or unsettled: a later tick resumes down them); fields at
// their zero value are left out.
type stateFileV2 struct {
	Version      int              `json:"version"`
	Packages     []statePackage   `json:"packages"`
	Placements   []statePlacement `json:"placements"`
	Declarations []*declState     `json:"declarations,omitempty"`
}

// statePackage is a package some placement runs (or is being given),
// with what each of its variants reserves on a node (Placement.Reserved
// of its placements, unless one says otherwise).
type statePackage struct {
	ID           string               `json:"id"`
	Version      string               `json:"version"`
	Kind         string               `json:"kind"`
	ManifestHash string               `json:"manifest_hash"`
	Labels       []string             `json:"labels,omitempty"`
	Excludes     []string             `json:"excludes,omitempty"`
	Reserved     map[string][2]uint64 `json:"reserved,omitempty"`
}

// statePlacement is one placement in a version 2 file; see Placement for
// the fields. Package indexes stateFileV2.Packages. What the rest of the
// file says is not repeated: Workload is absent when it is the order's
// name (else the package id), Reserved when it is what the package lists
// for the variant; an instance id that ends in "-" and the node id (as
// ctl.InstanceID makes them) is kept without that suffix (Instance),
// another whole (InstanceID).
type statePlacement struct {
	placementCore
	Workload   *string     `json:"workload,omitempty"`
	Reserved   *[2]uint64  `json:"reserved,omitempty"`
	Candidates []Candidate `json:"candidates,omitempty"`
	Moves      []time.Time `json:"moves,omitempty"`
}

// placementCore is the comparable part of a statePlacement (its fields
// are encoded as the placement's own): encodeCache compares it to tell
// whether a placement changed since it was last encoded. Order is
// compared by pointer: a placement's order is replaced, never changed in
// place.
type placementCore struct {
	DecisionID string    `json:"decision_id"`
	Package    int       `json:"package"`
	Node       string    `json:"node"`
	Variant    string    `json:"variant"`
	Instance   string    `json:"instance,omitempty"`
	InstanceID string    `json:"instance_id,omitempty"`
	PlacedAt   time.Time `json:"placed_at,omitzero"`
	Life       Lifecycle `json:"life"`
	HostState  string    `json:"host_state,omitempty"`
	Order      *Order    `json:"order,omitempty"`
	Cursor     int       `json:"cursor,omitempty"`
	// Reschedules is the lifelong move count files written before
	// Moves existed hold; read (movesOf), never written.
	Reschedules  int       `json:"reschedules,omitempty"`
	Capped       bool      `json:"capped,omitempty"`
	Attempts     int       `json:"attempts,omitempty"`
	NextAttempt  time.Time `json:"next_attempt,omitzero"`
	LastError    string    `json:"last_error,omitempty"`
	WasRunning   bool      `json:"was_running,omitempty"`
	LostReason   string    `json:"lost_reason,omitempty"`
	ReplacedBy   string    `json:"replaced_by,omitempty"`
	Replaces     string    `json:"replaces,omitempty"`
	Declared     string    `json:"declared,omitempty"`
	Replica      int       `json:"replica,omitempty"`
	Supersedes   string    `json:"supersedes,omitempty"`
	Stopped      bool      `json:"stopped,omitempty"`
	RetireReason string    `json:"retire_reason,omitempty"`
	FailedSince  time.Time `json:"failed_since,omitzero"`
}

// maxMoves bounds a placement's Moves in a state file: more than
// config's largest max_reschedules (1000) are never kept.
const maxMoves = 1024

// movesOf migrates the lifelong move count of a file written before
// Moves existed: n moves (at most maxMoves) at the time the placement was
// last placed, the latest a move of it can have been, so they leave the
// window RescheduleWindow after that (none when that time is unknown).
func movesOf(n int, placedAt time.Time) []time.Time {
	if n <= 0 || placedAt.IsZero() {
		return nil
	}
	out := make([]time.Time, min(n, maxMoves))
	for i := range out {
		out[i] = placedAt
	}
	return out
}

// defaultWorkload is the workload name of a placement of order o and
// package pkgID when nothing else says (workloadName).
func defaultWorkload(o *Order, pkgID string) string {
	if o != nil && o.Name != "" {
		return o.Name
	}
	return pkgID
}

// settledLife reports whether a placement in life has no use for its
// decision's ranked candidates any more: only a decision being dispatched
// or unsettled walks them.
func settledLife(l Lifecycle) bool {
	return l != LifeDispatching && l != LifeUnsettled
}

// loadState reads the state file; a missing file is an empty state.
func loadState(path string) (stateFile, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return stateFile{Version: StateVersion}, nil
	}
	if err != nil {
		return stateFile{}, fmt.Errorf("state %q: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return stateFile{}, fmt.Errorf("state %q is not a regular file: %w", path, ErrBadState)
	}
	if fi.Size() > MaxStateBytes {
		return stateFile{}, fmt.Errorf("state %q is larger than %d bytes: %w", path, MaxStateBytes, ErrBadState)
	}
	f, err := os.Open(path)
	if err != nil {
		return stateFile{}, fmt.Errorf("state %q: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxStateBytes+1))
	if err != nil {
		return stateFile{}, fmt.Errorf("read state %q: %w", path, err)
	}
	if len(data) > MaxStateBytes {
		return stateFile{}, fmt.Errorf("state %q is larger than %d bytes: %w", path, MaxStateBytes, ErrBadState)
	}
	s, err := decodeState(data)
	if err != nil {
		return stateFile{}, fmt.Errorf("state %q: %w: %w", path, ErrBadState, err)
	}
	return s, nil
}

// decodeState decodes a state file of either version strictly (unknown
// fields and trailing data are refused) and checks it.
func decodeState(data []byte) (stateFile, error) {
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return stateFile{}, err
	}
	var s stateFile
	switch head.Version {
	case StateVersion:
		var v2 stateFileV2
		if err := decodeStrict(data, &v2); err != nil {
			return stateFile{}, err
		}
		ps, err := v2.placements()
		if err != nil {
			return stateFile{}, err
		}
		s = stateFile{Version: StateVersion, Placements: ps, Declarations: v2.Declarations}
	case stateVersion1:
		var v1 stateFileV1
		if err := decodeStrict(data, &v1); err != nil {
			return stateFile{}, err
		}
		ps := make([]*Placement, len(v1.Placements))
		for i, p1 := range v1.Placements {
			if p1 == nil {
				continue // refused by check below
			}
			p := &p1.Placement
			// Version 1 kept the candidates of settled decisions too.
			if settledLife(p.Life) {
				p.Candidates, p.Cursor = nil, 0
			}
			if len(p.Moves) == 0 {
				p.Moves = movesOf(p1.Reschedules, p.PlacedAt)
			}
			ps[i] = p
		}
		s = stateFile{Version: stateVersion1, Placements: ps, Declarations: v1.Declarations}
	default:
		return stateFile{}, fmt.Errorf("version %d, want %d or %d", head.Version, stateVersion1, StateVersion)
	}
	seen := map[string]bool{}
	for i, p := range s.Placements {
		if err := p.check(); err != nil {
			return stateFile{}, fmt.Errorf("placements[%d]: %w", i, err)
		}
		if seen[p.DecisionID] {
			return stateFile{}, fmt.Errorf("placements[%d]: decision %s twice", i, p.DecisionID)
		}
		seen[p.DecisionID] = true
	}
	names := map[string]bool{}
	for i, d := range s.Declarations {
		if err := d.check(); err != nil {
			return stateFile{}, fmt.Errorf("declarations[%d]: %w", i, err)
		}
		if names[d.Name] {
			return stateFile{}, fmt.Errorf("declarations[%d]: %s twice", i, d.Name)
		}
		names[d.Name] = true
	}
	return s, nil
}

// decodeStrict decodes data into v, refusing unknown fields and trailing
// data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// placements expands a version 2 file's placements.
func (f *stateFileV2) placements() ([]*Placement, error) {
	out := make([]*Placement, len(f.Placements))
	for i, sp := range f.Placements {
		if sp.Package < 0 || sp.Package >= len(f.Packages) {
			return nil, fmt.Errorf("placements[%d]: package %d of %d", i, sp.Package, len(f.Packages))
		}
		pk := f.Packages[sp.Package]
		workload := defaultWorkload(sp.Order, pk.ID)
		if sp.Workload != nil {
			workload = *sp.Workload
		}
		iid := sp.InstanceID
		if sp.Instance != "" {
			if iid != "" {
				return nil, fmt.Errorf("placements[%d]: both instance and instance_id", i)
			}
			iid = sp.Instance + "-" + sp.Node
		}
		moves := sp.Moves
		if len(moves) == 0 {
			moves = movesOf(sp.Reschedules, sp.PlacedAt)
		}
		reserved := pk.Reserved[sp.Variant]
		if sp.Reserved != nil {
			reserved = *sp.Reserved
		}
		out[i] = &Placement{
			DecisionID: sp.DecisionID, Kind: pk.Kind, Workload: workload, Package: pk.ID, Version: pk.Version,
			ManifestHash: pk.ManifestHash, Candidates: sp.Candidates, Cursor: sp.Cursor,
			Node: sp.Node, Variant: sp.Variant, InstanceID: iid,
			Reserved: Reservation{HostBytes: reserved[0], AccelBytes: reserved[1]},
			PlacedAt: sp.PlacedAt, Life: sp.Life, HostState: sp.HostState, Order: sp.Order,
			Moves: moves, Capped: sp.Capped, Attempts: sp.Attempts, NextAttempt: sp.NextAttempt, LastError: sp.LastError,
			WasRunning: sp.WasRunning, LostReason: sp.LostReason, ReplacedBy: sp.ReplacedBy, Replaces: sp.Replaces,
			Declared: sp.Declared, Replica: sp.Replica, Supersedes: sp.Supersedes,
			Labels: slices.Clone(pk.Labels), Excludes: slices.Clone(pk.Excludes),
			Stopped: sp.Stopped, RetireReason: sp.RetireReason, FailedSince: sp.FailedSince,
		}
	}
	return out, nil
}

// check validates a restored placement.
func (p *Placement) check() error {
	if p == nil {
		return errors.New("null placement")
	}
	if !ctl.ValidDecisionID(p.DecisionID) {
		return fmt.Errorf("decision id %q is not 64 lower-case hex", p.DecisionID)
	}
	switch p.Life {
	case LifeDispatching, LifeUnsettled, LifePlaced, LifeLost, LifeRescheduled, LifeRetiring:
	default:
		return fmt.Errorf("unknown life %q", p.Life)
	}
	if p.Cursor < 0 || p.Cursor >= max(len(p.Candidates), 1) {
		return fmt.Errorf("cursor %d out of %d candidates", p.Cursor, len(p.Candidates))
	}
	if !settledLife(p.Life) && len(p.Candidates) == 0 {
		return fmt.Errorf("%s decision without its candidates", p.Life)
	}
	if p.Attempts < 0 {
		return errors.New("negative attempts")
	}
	if len(p.Moves) > maxMoves {
		return fmt.Errorf("%d moves, at most %d", len(p.Moves), maxMoves)
	}
	if p.Node == "" {
		return errors.New("no node")
	}
	if p.Declared != "" && !grammar.ValidName(p.Declared) {
		return fmt.Errorf("declared workload %q is not a name", p.Declared)
	}
	if p.Replica < 0 || p.Replica >= MaxReplicas {
		return fmt.Errorf("replica %d out of 0..%d", p.Replica, MaxReplicas-1)
	}
	if p.Supersedes != "" && !ctl.ValidDecisionID(p.Supersedes) {
		return fmt.Errorf("supersedes %q is not a decision id", p.Supersedes)
	}
	return nil
}

// encodeCache keeps each placement's encoding from the last persist, by
// decision id, with the value it encodes (spKey): a placement that did
// not change is not encoded again. The zero value is ready; it is not
// safe for concurrent use (persistMu guards the controller's).
type encodeCache struct {
	m   map[string]*cachedPlacement
	gen uint64
}

type cachedPlacement struct {
	key   spKey
	cands []Candidate
	moves []time.Time
	b     []byte
	// gen is the encode that last saw the placement.
	gen uint64
}

// spKey is a statePlacement as a comparable value, but for its
// candidates (compared apart: only unsettled decisions have any): its
// core, and its optional fields by value.
type spKey struct {
	core        placementCore
	workload    string
	hasWorkload bool
	reserved    [2]uint64
	hasReserved bool
}

func keyOf(sp *statePlacement) spKey {
	k := spKey{core: sp.placementCore}
	if sp.Workload != nil {
		k.workload, k.hasWorkload = *sp.Workload, true
	}
	if sp.Reserved != nil {
		k.reserved, k.hasReserved = *sp.Reserved, true
	}
	return k
}

// encode is json.Marshal of f, with each placement's encoding taken from
// c when its value is unchanged (the same bytes: encoding/json encodes a
// slice element by element); c then holds f's placements only.
func (c *encodeCache) encode(f *stateFileV2) ([]byte, error) {
	pk, err := json.Marshal(f.Packages)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = make(map[string]*cachedPlacement, len(f.Placements))
	}
	c.gen++
	parts := make([][]byte, len(f.Placements))
	size := 64 + len(pk)
	for i := range f.Placements {
		sp := &f.Placements[i]
		k := keyOf(sp)
		cp := c.m[sp.DecisionID]
		if cp == nil || cp.key != k || !slices.Equal(cp.cands, sp.Candidates) || !slices.EqualFunc(cp.moves, sp.Moves, time.Time.Equal) {
			b, err := json.Marshal(sp)
			if err != nil {
				return nil, err
			}
			if cp == nil {
				cp = &cachedPlacement{}
				c.m[sp.DecisionID] = cp
			}
			cp.key, cp.cands, cp.moves, cp.b = k, sp.Candidates, sp.Moves, b
		}
		cp.gen = c.gen
		parts[i] = cp.b
		size += len(cp.b) + 1
	}
	if len(c.m) > len(f.Placements) {
		// Forget the placements that are gone.
		for id, cp := range c.m {
			if cp.gen != c.gen {
				delete(c.m, id)
			}
		}
	}
	var ds []byte
	if len(f.Declarations) > 0 {
		if ds, err = json.Marshal(f.Declarations); err != nil {
			return nil, err
		}
	}
	out := make([]byte, 0, size+len(ds))
	out = append(out, `{"version":`...)
	out = strconv.AppendInt(out, int64(f.Version), 10)
	out = append(out, `,"packages":`...)
	out = append(out, pk...)
	out = append(out, `,"placements":[`...)
	for i, b := range parts {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	out = append(out, ']')
	if ds != nil {
		out = append(out, `,"declarations":`...)
		out = append(out, ds...)
	}
	out = append(out, '}')
	return out, nil
}

// encodeState encodes placements (sorted by decision id) and
// declarations (by name) as a version 2 file, with the encodings of
// unchanged placements from cache when it is not nil. It reads the
// placements and declarations only: the caller may hand them over from
// under its lock as snapshots (snapshotLocked) and encode without it.
func encodeState(ps []*Placement, ds []*declState, cache *encodeCache) ([]byte, error) {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b *Placement) int { return strings.Compare(a.DecisionID, b.DecisionID) })
	ds = slices.Clone(ds)
	slices.SortFunc(ds, func(a, b *declState) int { return strings.Compare(a.Name, b.Name) })
	f := stateFileV2{Version: StateVersion, Packages: []statePackage{}, Placements: make([]statePlacement, len(ps)), Declarations: ds}
	// Placements of one package share its entry; labels and excludes
	// come with the manifest, but are part of the key all the same.
	type pkgKey struct{ id, version, kind, hash, labels string }
	index := map[pkgKey]int{}
	for i, p := range ps {
		k := pkgKey{p.Package, p.Version, p.Kind, p.ManifestHash, ""}
		if len(p.Labels)+len(p.Excludes) > 0 {
			k.labels = strings.Join(p.Labels, "\x00") + "\x01" + strings.Join(p.Excludes, "\x00")
		}
		pi, ok := index[k]
		if !ok {
			pi = len(f.Packages)
			index[k] = pi
			f.Packages = append(f.Packages, statePackage{ID: p.Package, Version: p.Version, Kind: p.Kind, ManifestHash: p.ManifestHash,
				Labels: p.Labels, Excludes: p.Excludes})
		}
		f.Placements[i] = toStatePlacement(p, &f.Packages[pi], pi)
	}
	var (
		b   []byte
		err error
	)
	if cache != nil {
		b, err = cache.encode(&f)
	} else {
		b, err = json.Marshal(f)
	}
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return append(b, '\n'), nil
}

// toStatePlacement is p as a version 2 file keeps it, its package at
// index pi being pk: the first placement of a variant sets the package's
// reservation for it, which the others repeat only when theirs differs.
func toStatePlacement(p *Placement, pk *statePackage, pi int) statePlacement {
	sp := statePlacement{placementCore: placementCore{
		DecisionID: p.DecisionID, Package: pi, Node: p.Node, Variant: p.Variant,
		PlacedAt: p.PlacedAt, Life: p.Life, HostState: p.HostState,
		Order: p.Order, Capped: p.Capped, Attempts: p.Attempts, NextAttempt: p.NextAttempt, LastError: p.LastError,
		WasRunning: p.WasRunning, LostReason: p.LostReason, ReplacedBy: p.ReplacedBy, Replaces: p.Replaces, Declared: p.Declared, Replica: p.Replica,
		Supersedes: p.Supersedes, Stopped: p.Stopped, RetireReason: p.RetireReason, FailedSince: p.FailedSince,
	}}
	if !settledLife(p.Life) {
		sp.Candidates, sp.Cursor = p.Candidates, p.Cursor
	}
	sp.Moves = p.Moves
	if p.Workload != defaultWorkload(p.Order, p.Package) {
		sp.Workload = &p.Workload
	}
	if rest, ok := strings.CutSuffix(p.InstanceID, "-"+p.Node); ok && rest != "" {
		sp.Instance = rest
	} else {
		sp.InstanceID = p.InstanceID
	}
	r := [2]uint64{p.Reserved.HostBytes, p.Reserved.AccelBytes}
	if pk == nil {
		if r != [2]uint64{} {
			sp.Reserved = &r
		}
		return sp
	}
	if held, ok := pk.Reserved[p.Variant]; !ok && r != [2]uint64{} {
		if pk.Reserved == nil {
			pk.Reserved = map[string][2]uint64{}
		}
		pk.Reserved[p.Variant] = r
	} else if held != r {
		sp.Reserved = &r
	}
	return sp
}

// writeState writes the state file atomically with mode 0600.
func writeState(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, StateFileMode); err != nil {
		return fmt.Errorf("write state %q: %w", path, err)
	}
	return nil
}
