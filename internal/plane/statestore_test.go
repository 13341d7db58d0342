package plane

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// memStore is a delta store in memory: it applies each change to maps,
// as the replicated store's FSM does, and keeps the changes saved.
type memStore struct {
	mu         sync.Mutex // guards the fields below
	packages   map[string]StateEntry
	placements map[string]StateEntry
	decls      json.RawMessage
	decisions  []StateEntry
	saved      []StateChange
	fail       error
}

func newMemStore() *memStore {
	return &memStore{packages: map[string]StateEntry{}, placements: map[string]StateEntry{}}
}

func (m *memStore) Load(context.Context) (State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	byKey := func(a, b StateEntry) int { return strings.Compare(a.Key, b.Key) }
	return State{Packages: slices.SortedFunc(maps.Values(m.packages), byKey),
		Placements: slices.SortedFunc(maps.Values(m.placements), byKey), Declarations: m.decls,
		Decisions: slices.Clone(m.decisions)}, nil
}

func (m *memStore) Save(_ context.Context, ch StateChange) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.saved = append(m.saved, ch)
	if ch.Reset {
		clear(m.packages)
		clear(m.placements)
	}
	for _, e := range ch.Packages {
		m.packages[e.Key] = e
	}
	for _, e := range ch.Placements {
		m.placements[e.Key] = e
	}
	for _, k := range ch.Removed {
		delete(m.placements, k)
	}
	if ch.Declarations != nil {
		m.decls = ch.Declarations
	}
	m.decisions = append(m.decisions, ch.Decisions...)
	return nil
}

func (m *memStore) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.saved)
}

// deltaRig is newRig's controller on a memStore instead of the file.
func deltaRig(t *testing.T, m *memStore) *rig {
	t.Helper()
	r, _ := newRig(t, 4, 4, 4)
	r.restartOn(m)
	return r
}

func (r *rig) restartOn(m *memStore) {
	r.t.Helper()
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: r.cl, State: m})
	if err != nil {
		r.t.Fatalf("New: %v", err)
	}
	r.c = c
}

// A delta store gets what changed only: a place puts its placement
// (with its package the first time) and the decision's record; a tick
// that changes nothing saves nothing; a controller started on the store
// holds what the first one held.
func TestDeltaStoreSavesWhatChangedAndRestores(t *testing.T) {
	m := newMemStore()
	r := deltaRig(t, m)
	r.tick()
	n := m.count()
	first := r.place(Order{Name: "a", PackageDir: "/pkg/echo", Start: true})
	// Saved before the place is sent (dispatching), and once placed.
	ch := m.saved[n]
	if ch.Reset || len(ch.Placements) != 1 || ch.Placements[0].Key != first.DecisionID || len(ch.Packages) != 1 {
		t.Fatalf("first place saved %+v: want its placement and package", ch)
	}
	r.tick()
	n = m.count()
	second := r.place(Order{Name: "b", PackageDir: "/pkg/echo", Start: true})
	var puts, pkgs, decisions int
	for _, ch := range m.saved[n:] {
		puts += len(ch.Placements)
		pkgs += len(ch.Packages)
		decisions += len(ch.Decisions)
		for _, e := range ch.Placements {
			if e.Key != second.DecisionID {
				t.Fatalf("second place saved placement %s again", e.Key)
			}
		}
	}
	if puts == 0 || pkgs != 0 || decisions != 1 {
		t.Fatalf("second place: %d puts, %d packages, %d decisions; want its placement, no package, its decision", puts, pkgs, decisions)
	}
	r.tick()
	n = m.count()
	r.tick()
	if m.count() != n {
		t.Fatalf("a tick that changed nothing saved %+v", m.saved[n:])
	}
	want := r.c.Placements()
	r.restartOn(m)
	if diff := cmp.Diff(want, r.c.Placements()); diff != "" {
		t.Fatalf("restored from the store (-before +after):\n%s", diff)
	}
	if err := CheckState(must(m.Load(context.Background()))); err != nil {
		t.Fatal(err)
	}
}

// After a failed save what the store holds is unknown: the next save is
// a Reset with the whole state.
func TestDeltaStoreResetsAfterFailedSave(t *testing.T) {
	m := newMemStore()
	r := deltaRig(t, m)
	r.tick()
	r.place(Order{Name: "a", PackageDir: "/pkg/echo", Start: true})
	m.mu.Lock()
	m.fail = &NotLeaderError{}
	m.mu.Unlock()
	if _, err := r.c.Place(context.Background(), Order{Name: "b", PackageDir: "/pkg/echo", Start: true}); err == nil {
		t.Fatal("place with a failing store: no error")
	}
	m.mu.Lock()
	m.fail = nil
	m.mu.Unlock()
	n := m.count()
	r.place(Order{Name: "c", PackageDir: "/pkg/echo", Start: true})
	if ch := m.saved[n]; !ch.Reset || len(ch.Placements) != 2 {
		t.Fatalf("save after a failure: reset %v with %d placements, want a reset with 2", ch.Reset, len(ch.Placements))
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// FuzzDecodeRecords: any bytes as a placement's, a package's or the
// declarations' record never panic New's decoding of a store's state.
func FuzzDecodeRecords(f *testing.F) {
	pk := `{"id":"echo","version":"1.0.0","kind":"service","manifest_hash":"ab"}`
	key := PackageKey([]byte(pk))
	id := strings.Repeat("a", 64)
	f.Add([]byte(pk), []byte(`{"decision_id":"`+id+`","package":0,"node":"n-1","variant":"cpu","life":"placed"}`), []byte(`[]`))
	f.Add([]byte(`{}`), []byte(`{"decision_id":"`+id+`","life":"unsettled"}`), []byte(`[{"name":"w"}]`))
	f.Fuzz(func(t *testing.T, pkg, pl, decls []byte) {
		st := State{Packages: []StateEntry{{Key: key, Data: pkg}}, Placements: []StateEntry{{Key: id, Ref: key, Data: pl}},
			Declarations: decls}
		_ = CheckState(st)
	})
}

// TestDeltaMatchesFullState: a store given each change holds, record
// for record, the state encoded whole (a Reset), after a change of any
// field of any placement, placements gone and new ones: a field the
// delta did not compare (samePlacement) would leave its old record.
func TestDeltaMatchesFullState(t *testing.T) {
	v1, err := os.ReadFile(filepath.Join("testdata", "controller-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeState(v1)
	if err != nil {
		t.Fatal(err)
	}
	ps, ds := st.Placements, st.Declarations
	var cache deltaCache
	m := newMemStore()
	check := func(what string) {
		t.Helper()
		ch, err := cache.change(ps, ds, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Save(context.Background(), ch); err != nil {
			t.Fatal(err)
		}
		var whole deltaCache
		full, err := whole.change(ps, ds, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := newMemStore()
		if err := want.Save(context.Background(), full); err != nil {
			t.Fatal(err)
		}
		got, _ := m.Load(context.Background())
		exp, _ := want.Load(context.Background())
		got.Decisions, exp.Decisions = nil, nil
		// A package no placement names is left to the store to drop.
		got.Packages = slices.DeleteFunc(got.Packages, func(e StateEntry) bool {
			return !slices.ContainsFunc(got.Placements, func(p StateEntry) bool { return p.Ref == e.Key })
		})
		if diff := cmp.Diff(exp, got, cmp.AllowUnexported(State{})); diff != "" {
			t.Fatalf("%s: the store differs from the whole state (-whole +delta):\n%s", what, diff)
		}
	}
	check("cold")
	check("warm")
	key, _ := reflect.TypeFor[Placement]().FieldByName("DecisionID")
	for _, p := range ps {
		for i := range reflect.TypeFor[Placement]().NumField() {
			if i == key.Index[0] {
				continue // its key
			}
			if name, ok := changeField(t, p, i); ok {
				check(p.DecisionID[:4] + " " + name)
			}
		}
	}
	ps = ps[1:]
	check("one forgotten")
	ps = append(ps, &Placement{DecisionID: string(make64('e')), Node: "n", Life: LifePlaced})
	check("one added")
}
