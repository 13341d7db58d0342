package ctlraft

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/raftmesh"
)

// solo is a single controller's store in dir, as the daemon builds it
// without controller.voters: no mesh, one voter.
type solo struct {
	t      testing.TB
	s      *Store
	cancel context.CancelFunc
	done   chan error
}

const soloSelf = "n-0123456789abcdef"

func newSolo(t testing.TB, dir string, tweak func(*Config)) (*solo, error) {
	t.Helper()
	log := zaptest.NewLogger(t).Named("solo")
	l, err := raftmesh.New(raftmesh.Config{Voters: []string{soloSelf}}, raftmesh.Deps{Mesh: raftmesh.NoMesh{}, Self: soloSelf, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Self: soloSelf, Voters: []string{soloSelf}, Dir: filepath.Join(dir, "raft"), ImportPath: filepath.Join(dir, plane.StateFile)}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg, Deps{Layer: l, Logger: log})
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	t.Cleanup(func() { _ = l.Close() })
	return &solo{t: t, s: s}, nil
}

func mustSolo(t *testing.T, dir string, tweak func(*Config)) *solo { return mustSoloTB(t, dir, tweak) }

func mustSoloTB(t testing.TB, dir string, tweak func(*Config)) *solo {
	t.Helper()
	s, err := newSolo(t, dir, tweak)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (so *solo) run() {
	ctx, cancel := context.WithCancel(context.Background())
	so.cancel, so.done = cancel, make(chan error, 1)
	go func() { so.done <- so.s.Run(ctx) }()
	so.t.Cleanup(so.stop)
}

func (so *solo) stop() {
	if so.cancel == nil {
		return
	}
	so.cancel()
	if err := <-so.done; err != nil {
		so.t.Errorf("run: %v", err)
	}
	so.cancel = nil
}

func (so *solo) save(ch plane.StateChange) {
	so.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if err := so.s.Save(ctx, ch); err != nil {
		so.t.Fatal(err)
	}
}

func loaded(t *testing.T, s *Store) plane.State {
	t.Helper()
	st, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A single controller reads its state from disk before raft runs (its
// log and its newest snapshot), so the controller starts on it at once;
// raft's replay of those entries once it leads changes nothing (a
// decision record applied twice would show twice), and what is saved
// after lands on top.
func TestSoloRestartReadsStateBeforeRaft(t *testing.T) {
	for _, snap := range []bool{false, true} {
		t.Run(map[bool]string{false: "log", true: "snapshot and log"}[snap], func(t *testing.T) {
			dir := t.TempDir()
			first := mustSolo(t, dir, nil)
			// Save waits for the election (the first Save before Run).
			saved := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), waitBound)
				defer cancel()
				saved <- first.s.Save(ctx, changes()[0])
			}()
			first.run()
			if err := <-saved; err != nil {
				t.Fatalf("save before raft led: %v", err)
			}
			chs := changes()[1:]
			for i, ch := range chs {
				first.save(ch)
				if snap && i == 0 {
					if err := first.s.r.Load().Snapshot().Error(); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := loaded(t, first.s)
			first.stop()

			again := mustSolo(t, dir, nil)
			if got := loaded(t, again.s); !reflect.DeepEqual(got, want) {
				t.Fatalf("before raft runs: %+v\nwant %+v", got, want)
			}
			again.run()
			more := plane.StateChange{Decisions: []plane.StateEntry{rec(dkey(9), "", 9)}}
			again.save(more)
			want.Decisions = append(want.Decisions, more.Decisions...)
			if got := loaded(t, again.s); !reflect.DeepEqual(got, want) {
				t.Fatalf("after raft replayed and one more save: %+v\nwant %+v", got, want)
			}
		})
	}
}

// A snapshot is refused while raft applies again the entries read at
// start: it would carry them under an older index.
func TestSoloNoSnapshotWhileReplaying(t *testing.T) {
	f := newFSM()
	f.skipThrough = 5
	for i := uint64(1); i <= 5; i++ {
		if _, err := f.Snapshot(); !errors.Is(err, errReplaying) {
			t.Fatalf("snapshot at %d of 5 replayed: %v", i-1, err)
		}
		if res := f.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: []byte("not even an entry")}); res != nil {
			t.Fatalf("entry %d (read at start) applied again: %v", i, res)
		}
	}
	if _, err := f.Snapshot(); err != nil {
		t.Fatalf("snapshot after the replay: %v", err)
	}
	if res := f.Apply(&raft.Log{Index: 6, Type: raft.LogCommand, Data: []byte("x")}); res == nil {
		t.Fatal("a new malformed entry was not refused")
	}
}

// The upgrade of a single controller: its controller.json is its state
// from New on (before raft ran), imported once raft leads and kept aside;
// a restart reads raft, not the file, and nothing is imported twice.
func TestSoloImportsStateFile(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, 0, 2)
	path := filepath.Join(dir, plane.StateFile)
	ch, _, err := chain.Open(filepath.Join(dir, "old-chain.log"), ed25519.NewKeyFromSeed(make([]byte, 32)), chain.Options{Now: h.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	old, err := plane.New(h.cfg, h.targets, plane.Deps{Now: h.clk.Now, Chain: ch, Dispatcher: h.hosts, StatePath: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := old.Place(context.Background(), plane.Order{Name: "w", PackageDir: "/pkg/echo", Start: true, Config: ctl.InstanceConfig{Workload: "w"}})
	if err != nil || rep.Placed == nil {
		t.Fatalf("place: %v", err)
	}
	ch.Close()

	holds := func(st plane.State) bool {
		return len(st.Placements) == 1 && st.Placements[0].Key == rep.DecisionID
	}
	so := mustSolo(t, dir, nil)
	if st := loaded(t, so.s); !holds(st) {
		t.Fatalf("before raft runs the state is %+v, want the file's placement %s", st.Placements, rep.DecisionID)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the file moved before it was imported: %v", err)
	}
	so.run()
	so.save(plane.StateChange{Decisions: []plane.StateEntry{rec(dkey(7), "", 7)}}) // after the import
	if _, err := os.Stat(path + ImportedSuffix); err != nil {
		t.Fatalf("imported file not kept aside: %v", err)
	}
	if !holds(loaded(t, so.s)) || !so.s.fsm.isImported() {
		t.Fatal("the replica lacks the import")
	}
	so.stop()
	again := mustSolo(t, dir, nil)
	if st := loaded(t, again.s); !holds(st) || len(st.Decisions) != 1 {
		t.Fatalf("after a restart: %+v", st)
	}
}

// A bad state file stops New with its name and is left as it is.
func TestSoloRefusesBadStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, plane.StateFile)
	if err := os.WriteFile(path, []byte(`{"version": 1, "placements": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newSolo(t, dir, nil); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("New = %v, want the file's error", err)
	}
	if b, _ := os.ReadFile(path); !strings.HasSuffix(string(b), "[") {
		t.Fatal("the bad file was changed")
	}
}

// A raft state of several voters is not taken by a controller that lists
// none: it could never lead them.
func TestSoloRefusesClusterState(t *testing.T) {
	dir := t.TempDir()
	st, err := raftmesh.OpenStores(filepath.Join(dir, "raft"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(soloSelf))
	conf := raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: soloSelf, Address: soloSelf}, {Suffrage: raft.Voter, ID: "n-other", Address: "n-other"}}}
	rc := raftmesh.LANConfig(soloSelf, zaptest.NewLogger(t))
	if err := raft.BootstrapCluster(rc, st.Log, st.Stable, st.Snapshots, trans, conf); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := newSolo(t, dir, nil); err == nil || !strings.Contains(err.Error(), "controller.voters") {
		t.Fatalf("New = %v, want a refusal naming controller.voters", err)
	}
}

// Save of a single controller whose raft never runs fails within the
// apply timeout, saying why.
func TestSoloSaveWithoutRaftFails(t *testing.T) {
	so := mustSolo(t, t.TempDir(), func(c *Config) { c.ApplyTimeout = 50 * time.Millisecond })
	err := so.s.Save(context.Background(), changes()[0])
	if err == nil || !strings.Contains(err.Error(), "did not start") {
		t.Fatalf("Save = %v", err)
	}
}
