package ctlraft

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nodeld/nodeld/internal/plane"
)

// Kinds of log entry: the first byte of its data.
const (
	// entryChange is a plane.StateChange the leader saved.
	entryChange byte = 1
	// entryImport is a state file imported: a Reset change, applied only
	// if no import was applied before.
	entryImport byte = 2
)

// ErrEntry is wrapped by every refusal of an entry or a snapshot.
var ErrEntry = errors.New("ctlraft: malformed entry")

// errReplaying refuses a snapshot while raft applies again the entries a
// single controller's state holds since New (solo.go).
var errReplaying = errors.New("ctlraft: no snapshot while the entries read at start are applied again")

// ErrImported is the result of an import entry applied after another, or
// to a cluster that holds state already: it changes nothing.
var ErrImported = errors.New("ctlraft: a state file was imported already, or the cluster holds state")

// encodeEntry frames ch as a log entry of kind.
func encodeEntry(kind byte, ch *plane.StateChange) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte(kind)
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ch); err != nil {
		return nil, fmt.Errorf("encode entry: %w", err)
	}
	if b.Len() > MaxEntryBytes {
		return nil, fmt.Errorf("entry of %d bytes, at most %d", b.Len(), MaxEntryBytes)
	}
	return b.Bytes(), nil
}

// decodeEntry decodes a log entry strictly and checks its records.
func decodeEntry(data []byte) (byte, plane.StateChange, error) {
	if len(data) == 0 {
		return 0, plane.StateChange{}, fmt.Errorf("%w: empty", ErrEntry)
	}
	if len(data) > MaxEntryBytes {
		return 0, plane.StateChange{}, fmt.Errorf("%w: %d bytes, at most %d", ErrEntry, len(data), MaxEntryBytes)
	}
	kind := data[0]
	if kind != entryChange && kind != entryImport {
		return 0, plane.StateChange{}, fmt.Errorf("%w: kind %d", ErrEntry, kind)
	}
	var ch plane.StateChange
	if err := decodeStrict(data[1:], &ch); err != nil {
		return 0, plane.StateChange{}, fmt.Errorf("%w: %w", ErrEntry, err)
	}
	if kind == entryImport && !ch.Reset {
		return 0, plane.StateChange{}, fmt.Errorf("%w: an import that is not a reset", ErrEntry)
	}
	if err := checkChange(&ch); err != nil {
		return 0, plane.StateChange{}, err
	}
	return kind, ch, nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields
// and trailing data.
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

// checkChange checks the records of ch on their own: keys, sizes and
// counts, no key twice. (That each placement's package is held is
// checked against the state, when applied.)
func checkChange(ch *plane.StateChange) error {
	if n := len(ch.Placements) + len(ch.Removed); n > MaxPlacements {
		return fmt.Errorf("%w: %d placements, at most %d", ErrEntry, n, MaxPlacements)
	}
	if len(ch.Packages) > MaxPlacements {
		return fmt.Errorf("%w: %d packages, at most %d", ErrEntry, len(ch.Packages), MaxPlacements)
	}
	if len(ch.Decisions) > plane.MaxReplicaDecisions {
		return fmt.Errorf("%w: %d decisions, at most %d", ErrEntry, len(ch.Decisions), plane.MaxReplicaDecisions)
	}
	seen := make(map[string]bool, len(ch.Packages)+len(ch.Placements)+len(ch.Removed))
	for i, e := range ch.Packages {
		if err := checkRecord(e, packageKey, false); err != nil {
			return fmt.Errorf("%w: packages[%d]: %w", ErrEntry, i, err)
		}
		if seen["p"+e.Key] {
			return fmt.Errorf("%w: package %s twice", ErrEntry, e.Key)
		}
		seen["p"+e.Key] = true
	}
	for i, e := range ch.Placements {
		if err := checkRecord(e, placementKey, true); err != nil {
			return fmt.Errorf("%w: placements[%d]: %w", ErrEntry, i, err)
		}
		if seen["d"+e.Key] {
			return fmt.Errorf("%w: placement %s twice", ErrEntry, e.Key)
		}
		seen["d"+e.Key] = true
	}
	for i, k := range ch.Removed {
		if !placementKey(k) {
			return fmt.Errorf("%w: removed[%d]: key %q", ErrEntry, i, k)
		}
		if seen["d"+k] {
			return fmt.Errorf("%w: placement %s put and removed, or removed twice", ErrEntry, k)
		}
		seen["d"+k] = true
	}
	for i, e := range ch.Decisions {
		if err := checkRecord(e, placementKey, false); err != nil {
			return fmt.Errorf("%w: decisions[%d]: %w", ErrEntry, i, err)
		}
	}
	if ch.Declarations != nil && (len(ch.Declarations) == 0 || len(ch.Declarations) > MaxEntryBytes || ch.Declarations[0] != '[') {
		return fmt.Errorf("%w: declarations are not a JSON array", ErrEntry)
	}
	return nil
}

// checkRecord checks one record: its key, its reference (only where
// withRef) and its size.
func checkRecord(e plane.StateEntry, key func(string) bool, withRef bool) error {
	switch {
	case !key(e.Key):
		return fmt.Errorf("key %q", e.Key)
	case withRef && !packageKey(e.Ref):
		return fmt.Errorf("package reference %q", e.Ref)
	case !withRef && e.Ref != "":
		return fmt.Errorf("a reference %q where none is", e.Ref)
	case len(e.Data) == 0 || e.Data[0] != '{':
		return errors.New("data is not a JSON object")
	case len(e.Data) > MaxRecordBytes:
		return fmt.Errorf("%d bytes, at most %d", len(e.Data), MaxRecordBytes)
	}
	return nil
}

// placementKey reports whether k is a decision id: 64 lower-case hex.
func placementKey(k string) bool { return lowerHex(k, 64) }

// packageKey reports whether k is a plane.PackageKey: 32 lower-case hex.
func packageKey(k string) bool { return lowerHex(k, 32) }

func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
