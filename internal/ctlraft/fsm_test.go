package ctlraft

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/nodeld/nodeld/internal/plane"
)

func dkey(i int) string { return fmt.Sprintf("%064x", i) }
func pkey(i int) string { return fmt.Sprintf("%032x", i) }

func entry(t testing.TB, kind byte, ch plane.StateChange) []byte {
	t.Helper()
	b, err := encodeEntry(kind, &ch)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var index uint64

func apply(f *fsm, data []byte) any {
	index++
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
}

// snapBytes is f's snapshot as persisted.
func snapBytes(t testing.TB, f *fsm) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

func rec(k, ref string, v int) plane.StateEntry {
	return plane.StateEntry{Key: k, Ref: ref, Data: json.RawMessage(fmt.Sprintf(`{"v":%d}`, v))}
}

// changes is a run of deltas: puts, replacements, removals, a package
// dropped once no placement names it, declarations, decisions.
func changes() []plane.StateChange {
	return []plane.StateChange{
		{Reset: true, Packages: []plane.StateEntry{rec(pkey(1), "", 1), rec(pkey(2), "", 2)},
			Placements: []plane.StateEntry{rec(dkey(1), pkey(1), 1), rec(dkey(2), pkey(2), 2)}, Declarations: json.RawMessage(`[]`)},
		{Placements: []plane.StateEntry{rec(dkey(3), pkey(1), 3)}, Decisions: []plane.StateEntry{rec(dkey(3), "", 3)}},
		{Placements: []plane.StateEntry{rec(dkey(1), pkey(1), 11)}, Removed: []string{dkey(2)}},
		{Declarations: json.RawMessage(`[{"name":"w"}]`)},
	}
}

// The same entries give the same state on every voter; a snapshot
// restores it exactly; a package no placement names is dropped.
func TestApplyIsDeterministicAndSnapshotsRestore(t *testing.T) {
	a, b := newFSM(), newFSM()
	for _, ch := range changes() {
		data := entry(t, entryChange, ch)
		for _, f := range []*fsm{a, b} {
			if res := apply(f, data); res != nil {
				t.Fatalf("apply: %v", res)
			}
		}
	}
	sa, sb := snapBytes(t, a), snapBytes(t, b)
	if !bytes.Equal(sa, sb) {
		t.Fatalf("two voters differ:\n%s\n%s", sa, sb)
	}
	st := a.state()
	if len(st.Placements) != 2 || len(st.Packages) != 1 || st.Packages[0].Key != pkey(1) {
		t.Fatalf("state %+v: want placements 1 and 3 and package 1 only", st)
	}
	if string(st.Placements[0].Data) != `{"v":11}` || string(st.Declarations) != `[{"name":"w"}]` || len(st.Decisions) != 1 {
		t.Fatalf("state %+v", st)
	}
	c := newFSM()
	if err := c.Restore(io.NopCloser(bytes.NewReader(sa))); err != nil {
		t.Fatal(err)
	}
	if sc := snapBytes(t, c); !bytes.Equal(sc, sa) {
		t.Fatalf("restored:\n%s\nwant\n%s", sc, sa)
	}
}

// A malformed entry is refused the same way on every voter and changes
// nothing.
func TestMalformedEntryChangesNothing(t *testing.T) {
	good := entry(t, entryChange, changes()[0])
	bad := map[string][]byte{
		"empty":         {},
		"unknown kind":  append([]byte{9}, good[1:]...),
		"not json":      append([]byte{entryChange}, "{"...),
		"unknown field": append([]byte{entryChange}, `{"bogus":1}`...),
		"trailing":      append(bytes.Clone(good), "{}"...),
		"no package":    entry(t, entryChange, plane.StateChange{Placements: []plane.StateEntry{rec(dkey(9), pkey(9), 9)}}),
		"bad key":       entry(t, entryChange, plane.StateChange{Placements: []plane.StateEntry{rec("x", pkey(1), 9)}}),
		"bad ref":       entry(t, entryChange, plane.StateChange{Placements: []plane.StateEntry{rec(dkey(9), "y", 9)}}),
		"twice":         entry(t, entryChange, plane.StateChange{Placements: []plane.StateEntry{rec(dkey(1), pkey(1), 9), rec(dkey(1), pkey(1), 8)}}),
		"put removed":   entry(t, entryChange, plane.StateChange{Placements: []plane.StateEntry{rec(dkey(1), pkey(1), 9)}, Removed: []string{dkey(1)}}),
		"remove absent": entry(t, entryChange, plane.StateChange{Removed: []string{dkey(7)}}),
		"no data":       entry(t, entryChange, plane.StateChange{Placements: []plane.StateEntry{{Key: dkey(1), Ref: pkey(1)}}}),
		"ref on pkg":    entry(t, entryChange, plane.StateChange{Packages: []plane.StateEntry{rec(pkey(3), pkey(1), 3)}}),
		"import again":  entry(t, entryImport, plane.StateChange{Reset: true}),
		"import delta":  append([]byte{entryImport}, good[1:]...)[:0],
	}
	bad["import delta"] = append([]byte{entryImport}, `{"placements":[]}`...)
	f := newFSM()
	if res := apply(f, entry(t, entryImport, changes()[0])); res != nil {
		t.Fatal(res)
	}
	before := snapBytes(t, f)
	for name, data := range bad {
		res := apply(f, data)
		err, _ := res.(error)
		if !errors.Is(err, ErrEntry) && !errors.Is(err, ErrImported) {
			t.Errorf("%s: result %v, want a refusal", name, res)
		}
		if after := snapBytes(t, f); !bytes.Equal(after, before) {
			t.Fatalf("%s changed the state:\n%s", name, after)
		}
	}
}

// The decisions kept are the last MaxReplicaDecisions.
func TestDecisionsBounded(t *testing.T) {
	f := newFSM()
	for i := range plane.MaxReplicaDecisions + 10 {
		if res := apply(f, entry(t, entryChange, plane.StateChange{Decisions: []plane.StateEntry{rec(dkey(i), "", i)}})); res != nil {
			t.Fatal(res)
		}
	}
	st := f.state()
	if len(st.Decisions) != plane.MaxReplicaDecisions || st.Decisions[0].Key != dkey(10) {
		t.Fatalf("%d decisions from %s", len(st.Decisions), st.Decisions[0].Key)
	}
}

// A snapshot it refuses leaves the state as it was.
func TestRestoreRefusesBadSnapshot(t *testing.T) {
	f := newFSM()
	for _, ch := range changes() {
		apply(f, entry(t, entryChange, ch))
	}
	before := snapBytes(t, f)
	for _, bad := range []string{"", "{", `{"version":2,"packages":[],"placements":[]}`,
		`{"version":1,"packages":[],"placements":[{"k":"` + dkey(1) + `","r":"` + pkey(1) + `","d":1}]}`,
		`{"version":1,"packages":[],"placements":[],"extra":1}`} {
		if err := f.Restore(io.NopCloser(strings.NewReader(bad))); !errors.Is(err, ErrEntry) {
			t.Errorf("restore %q: %v, want ErrEntry", bad, err)
		}
		if after := snapBytes(t, f); !bytes.Equal(after, before) {
			t.Fatalf("restore %q changed the state", bad)
		}
	}
}

// FuzzDecodeEntry: any bytes as a log entry never panic; an entry
// accepted leaves a state whose snapshot restores to the same bytes.
func FuzzDecodeEntry(f *testing.F) {
	for _, ch := range changes() {
		f.Add(entry(f, entryChange, ch))
	}
	f.Add(entry(f, entryImport, changes()[0]))
	f.Add([]byte{entryChange, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newFSM()
		apply(m, entry(t, entryChange, changes()[0]))
		apply(m, data)
		s := snapBytes(t, m)
		r := newFSM()
		if err := r.Restore(io.NopCloser(bytes.NewReader(s))); err != nil {
			t.Fatalf("own snapshot refused: %v\n%s", err, s)
		}
		if s2 := snapBytes(t, r); !bytes.Equal(s, s2) {
			t.Fatalf("snapshot round trip differs")
		}
	})
}

// FuzzRestore: any bytes as a snapshot never panic; one accepted
// persists again to a snapshot that restores the same.
func FuzzRestore(f *testing.F) {
	m := newFSM()
	for _, ch := range changes() {
		apply(m, entry(f, entryChange, ch))
	}
	f.Add(snapBytes(f, m))
	f.Add([]byte(`{"version":1,"packages":[],"placements":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newFSM()
		if r.Restore(io.NopCloser(bytes.NewReader(data))) != nil {
			return
		}
		s := snapBytes(t, r)
		r2 := newFSM()
		if err := r2.Restore(io.NopCloser(bytes.NewReader(s))); err != nil {
			t.Fatalf("re-persisted snapshot refused: %v", err)
		}
	})
}

// An import into a cluster that holds state already (another leader wrote
// first) is refused and changes nothing: the import is a reset, which
// would drop what that leader placed.
func TestImportRefusedOverState(t *testing.T) {
	f := newFSM()
	if res := apply(f, entry(t, entryChange, changes()[0])); res != nil {
		t.Fatalf("apply: %v", res)
	}
	before := snapBytes(t, f)
	imp := plane.StateChange{Reset: true, Packages: []plane.StateEntry{rec(pkey(9), "", 9)},
		Placements: []plane.StateEntry{rec(dkey(9), pkey(9), 9)}}
	if res := apply(f, entry(t, entryImport, imp)); res != ErrImported {
		t.Fatalf("import over state: %v, want ErrImported", res)
	}
	if after := snapBytes(t, f); !bytes.Equal(after, before) {
		t.Fatalf("the refused import changed the state:\n%s\nwant\n%s", after, before)
	}
	if g := newFSM(); apply(g, entry(t, entryImport, imp)) != nil || len(g.state().Placements) != 1 {
		t.Fatal("an import into an empty cluster was not applied")
	}
}
