package plane

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeld/nodeld/internal/pkg"
)

// TestStateAtScaleRestores: 10,000 placements made on a 100-node
// cluster, as Place leaves them once placed (the ranked candidates
// dropped), and 100 decisions still unsettled with their 100 ranked
// candidates each, are written to controller.json well under
// MaxStateBytes (under half of it) and restored by a restart. (Version 1
// kept every placement's candidates: 1,000 such placements took 5.2 MB,
// and about 1,600 reached the limit, past which the controller would not
// start again.)
func TestStateAtScaleRestores(t *testing.T) {
	r, _ := newRig(t, 8)
	nodes := make([]string, 100)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n-%016x", uint64(i)*0x9e3779b97f4a7c15)
	}
	const placed, unsettled = 10000, 100
	r.c.mu.Lock()
	for i := range placed + unsettled {
		sum := sha256.Sum256(fmt.Appendf(nil, "decision %d", i))
		o := &Order{Name: fmt.Sprintf("svc-%d", i), PackageDir: "/pkg/echo", Start: true}
		pl := &Placement{DecisionID: hex.EncodeToString(sum[:]), Kind: pkg.KindService, Workload: o.Name, Package: "echo",
			Version: "1.0.0", ManifestHash: hex.EncodeToString(sum[:1]), Life: LifePlaced, HostState: "running", WasRunning: true,
			PlacedAt: t0, Order: o, Node: nodes[i%100], Variant: "cpu", InstanceID: fmt.Sprintf("echo-%08x-%s", i, nodes[i%100]),
			Reserved: Reservation{HostBytes: 1 << 30}}
		if i >= placed {
			pl.Life, pl.HostState, pl.WasRunning, pl.PlacedAt = LifeUnsettled, "", false, time.Time{}
			for k := range nodes {
				pl.Candidates = append(pl.Candidates, Candidate{Node: nodes[(i+k)%100], Variant: "cpu"})
			}
			pl.Cursor = 7
			pl.Node = pl.Candidates[7].Node
		}
		r.c.placements[pl.DecisionID] = pl
	}
	r.c.mu.Unlock()
	if err := r.c.w.persist(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(r.state)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("controller.json: %d bytes for %d placed and %d unsettled placements (%d a placement)", fi.Size(), placed, unsettled, fi.Size()/(placed+unsettled))
	if fi.Size() > MaxStateBytes/2 {
		t.Fatalf("controller.json is %d bytes, over half of MaxStateBytes (%d)", fi.Size(), MaxStateBytes)
	}
	before, err := os.ReadFile(r.state)
	if err != nil {
		t.Fatal(err)
	}
	r.restart()
	if n := len(r.c.Placements()); n != placed+unsettled {
		t.Fatalf("%d placements restored, want %d", n, placed+unsettled)
	}
	// What was restored is what was written: written again, the file is
	// the same, byte for byte (its encoding is all a placement keeps).
	if err := r.c.w.persist(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(r.state)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("restored placements differ: %d bytes written again, %d before", len(after), len(before))
	}
}

// TestStateVersion1Migrates: a version 1 controller.json (every placement
// whole, with its ranked candidates even once placed), as the previous
// controller wrote it, loads: every placement and declaration as it was,
// but the candidates of settled decisions (an unsettled one keeps its
// candidates and cursor). New leaves the file as it is; the next persist
// writes it as version 2 (0600), which loads to the same placements.
func TestStateVersion1Migrates(t *testing.T) {
	r, _ := newRig(t, 8)
	v1, err := os.ReadFile(filepath.Join("testdata", "controller-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var old stateFileV1
	if err := json.Unmarshal(v1, &old); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.state, v1, StateFileMode); err != nil {
		t.Fatal(err)
	}
	r.restart()
	got := r.c.Placements()
	if len(got) != len(old.Placements) {
		t.Fatalf("%d placements from version 1, want %d", len(got), len(old.Placements))
	}
	for i, p := range old.Placements {
		want := p.clone()
		if settledLife(want.Life) {
			want.Candidates, want.Cursor = nil, 0
		}
		// The lifelong move count becomes moves at its last placement.
		want.Moves = movesOf(p.Reschedules, p.PlacedAt)
		if diff := cmp.Diff(want, got[i], cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("placement %s from version 1 (-want +got):\n%s", p.DecisionID[:8], diff)
		}
	}
	if u := got[1]; u.Life != LifeUnsettled || len(u.Candidates) != 3 || u.Cursor != 2 {
		t.Errorf("unsettled decision restored with %d candidates, cursor %d", len(u.Candidates), u.Cursor)
	}
	r.c.mu.Lock()
	d := r.c.decls["chat"]
	r.c.mu.Unlock()
	if d == nil || d.Attempts != 1 || d.LastError != "no eligible node" || !d.NextAttempt.Equal(old.Declarations[0].NextAttempt) {
		t.Errorf("declaration restored as %+v", d)
	}
	if b, _ := os.ReadFile(r.state); !bytes.Equal(b, v1) {
		t.Fatal("New rewrote the version 1 file before any change")
	}
	if err := r.c.w.persist(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(r.state)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(`{"version":2,`)) || len(b) >= len(v1) {
		t.Fatalf("persisted after migration (%d bytes, version 1 was %d):\n%s", len(b), len(v1), b)
	}
	if fi, err := os.Stat(r.state); err != nil || fi.Mode().Perm() != StateFileMode {
		t.Fatalf("state file mode: %v %v", fi.Mode(), err)
	}
	r.restart()
	if diff := cmp.Diff(got, r.c.Placements(), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("version 2 reload differs (-migrated +reloaded):\n%s", diff)
	}
}

// rewritten reports whether the state file was replaced since pin: pin
// keeps a hard link to the file (so its inode cannot be reused), and
// atomicfile replaces the file by a rename.
func pin(t *testing.T, path string) string {
	t.Helper()
	link := path + ".pin"
	os.Remove(link)
	if err := os.Link(path, link); err != nil {
		t.Fatal(err)
	}
	return link
}

func rewritten(t *testing.T, path, link string) bool {
	t.Helper()
	a, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(link)
	if err != nil {
		t.Fatal(err)
	}
	return !os.SameFile(a, b)
}

// TestUnchangedStateNotRewritten: a tick that changes nothing does not
// rewrite controller.json (a multi-megabyte write and fsync every tick
// at scale); a change does.
func TestUnchangedStateNotRewritten(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	r.tick()
	r.place(echo)
	r.step()
	link := pin(t, r.state)
	r.step()
	r.step()
	if rewritten(t, r.state, link) {
		t.Fatal("a tick that changed nothing rewrote the state file")
	}
	r.place(Order{PackageDir: "/pkg/echo", Start: true, Name: "echo-2"})
	if !rewritten(t, r.state, link) {
		t.Fatal("a place did not rewrite the state file")
	}
	r.restart()
	if n := len(r.c.Placements()); n != 2 {
		t.Fatalf("%d placements restored, want 2", n)
	}
}

// TestEncodeCacheMatchesFullEncoding: the state encoded with the
// controller's cache (each unchanged placement's encoding reused) is
// byte for byte the state encoded whole, after a change of any field of
// any placement: a field the cache did not compare would leave its old
// encoding in the file.
func TestEncodeCacheMatchesFullEncoding(t *testing.T) {
	v1, err := os.ReadFile(filepath.Join("testdata", "controller-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeState(v1)
	if err != nil {
		t.Fatal(err)
	}
	ps, ds := st.Placements, st.Declarations
	var cache encodeCache
	check := func(what string) {
		t.Helper()
		want, err := encodeState(ps, ds, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeState(ps, ds, &cache)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: cached encoding differs:\n%s\nwant:\n%s", what, got, want)
		}
	}
	check("cold")
	check("warm")
	// Every field of every placement, one at a time.
	for _, p := range ps {
		for i := range reflect.TypeFor[Placement]().NumField() {
			if name, ok := changeField(t, p, i); ok {
				check(p.DecisionID[:4] + " " + name)
			}
		}
	}
	// Placements gone, and new ones.
	ps = ps[1:]
	check("one forgotten")
	ps = append(ps, &Placement{DecisionID: string(make64('e')), Node: "n", Life: LifePlaced})
	check("one added")
	if got := reflect.TypeFor[statePlacement]().NumField(); got != 5 {
		t.Fatalf("statePlacement has %d fields: keep the ones outside placementCore in spKey", got)
	}
}

// changeField changes field i of p (every field type Placement has: a
// new field of another type fails the test until it is taught here) and
// returns its name; ok is false for a field it leaves alone (Cursor
// without candidates, where it has no meaning).
func changeField(t *testing.T, p *Placement, i int) (name string, ok bool) {
	t.Helper()
	f := reflect.ValueOf(p).Elem().Field(i)
	name = reflect.TypeFor[Placement]().Field(i).Name
	switch v := f.Addr().Interface().(type) {
	case *string:
		*v += "x"
	case *Lifecycle:
		if *v == LifePlaced {
			*v = LifeLost
		} else {
			*v = LifePlaced
		}
	case *int:
		if name == "Cursor" && len(p.Candidates) == 0 {
			return name, false
		}
		*v++
	case *bool:
		*v = !*v
	case *time.Time:
		*v = v.Add(time.Second)
	case *Reservation:
		v.HostBytes++
	case *[]string:
		*v = append(slices.Clone(*v), "new")
	case *[]time.Time:
		*v = append(slices.Clone(*v), t0)
	case *[]Candidate:
		*v = append(slices.Clone(*v), Candidate{Node: "n-new", Variant: "cpu"})
	case **Order:
		o := Order{Name: "changed"}
		if *v != nil {
			o = **v
			o.Name += "-changed"
		}
		*v = &o
	default:
		t.Fatalf("field %s of type %s: teach changeField to change it", name, f.Type())
	}
	return name, true
}
