package plane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/grammar"
)

// StateVersion is the only state file version read and written.
const StateVersion = 1

// MaxStateBytes bounds the state file.
const MaxStateBytes = 8 << 20

// StateFileMode is the state file's mode.
const StateFileMode = 0o600

// ErrBadState is wrapped by New for a state file it refuses (not a regular
// file, too large, malformed, another version). The file is left as it is.
var ErrBadState = errors.New("controller state file refused")

// stateFile is the document in controller.json.
type stateFile struct {
	Version    int          `json:"version"`
	Placements []*Placement `json:"placements"`
	// Declarations is the progress of declared workloads beyond their
	// placements (the backoff of failed attempts).
	Declarations []*declState `json:"declarations,omitempty"`
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
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s stateFile
	if err := dec.Decode(&s); err != nil {
		return stateFile{}, fmt.Errorf("state %q: %w: %w", path, ErrBadState, err)
	}
	if dec.More() {
		return stateFile{}, fmt.Errorf("state %q: trailing data: %w", path, ErrBadState)
	}
	if s.Version != StateVersion {
		return stateFile{}, fmt.Errorf("state %q: version %d, want %d: %w", path, s.Version, StateVersion, ErrBadState)
	}
	seen := map[string]bool{}
	for i, p := range s.Placements {
		if err := p.check(); err != nil {
			return stateFile{}, fmt.Errorf("state %q: placements[%d]: %w: %w", path, i, err, ErrBadState)
		}
		if seen[p.DecisionID] {
			return stateFile{}, fmt.Errorf("state %q: placements[%d]: decision %s twice: %w", path, i, p.DecisionID, ErrBadState)
		}
		seen[p.DecisionID] = true
	}
	names := map[string]bool{}
	for i, d := range s.Declarations {
		if err := d.check(); err != nil {
			return stateFile{}, fmt.Errorf("state %q: declarations[%d]: %w: %w", path, i, err, ErrBadState)
		}
		if names[d.Name] {
			return stateFile{}, fmt.Errorf("state %q: declarations[%d]: %s twice: %w", path, i, d.Name, ErrBadState)
		}
		names[d.Name] = true
	}
	return s, nil
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

// encodeState encodes placements (sorted by decision id) and
// declarations (by name).
func encodeState(ps []*Placement, ds []*declState) ([]byte, error) {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b *Placement) int { return cmpString(a.DecisionID, b.DecisionID) })
	if ps == nil {
		ps = []*Placement{}
	}
	ds = slices.Clone(ds)
	slices.SortFunc(ds, func(a, b *declState) int { return cmpString(a.Name, b.Name) })
	// Compact: the file is rewritten whole at every change, and an
	// indented one is twice the size (every placement keeps its ranked
	// candidates) and three times the CPU to encode.
	b, err := json.Marshal(stateFile{Version: StateVersion, Placements: ps, Declarations: ds})
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return append(b, '\n'), nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// writeState writes the state file atomically with mode 0600.
func writeState(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, StateFileMode); err != nil {
		return fmt.Errorf("write state %q: %w", path, err)
	}
	return nil
}
