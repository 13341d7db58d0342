package raftmesh

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// modes maps every path under dir to its permission bits.
func modes(t *testing.T, dir string) map[string]fs.FileMode {
	t.Helper()
	out := map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[rel] = fi.Mode().Perm()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The stores live in a 0700 directory with 0600 files, snapshots
// included, and a log or stable write survives a reopen.
func TestOpenStoresModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "raft")
	st, err := OpenStores(dir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := st.Log.StoreLog(&raft.Log{Index: 1, Term: 7, Type: raft.LogCommand, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	sink, err := st.Snapshots.Create(raft.SnapshotVersionMax, 1, 7, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	got := modes(t, dir)
	files := 0
	for path, mode := range got {
		fi, err := os.Stat(filepath.Join(dir, path))
		if err != nil {
			t.Fatal(err)
		}
		want := fs.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if mode != want {
			t.Errorf("%s: mode %#o, want %#o", path, mode, want)
		}
	}
	if files < 3 { // raft.db, the snapshot's meta.json and state.bin
		t.Errorf("files %v: want the log and a snapshot", got)
	}

	st, err = OpenStores(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if v, err := st.Stable.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Errorf("term after reopen: %d, %v", v, err)
	}
	if snaps, err := st.Snapshots.List(); err != nil || len(snaps) != 1 {
		t.Errorf("snapshots after reopen: %v, %v", snaps, err)
	}
}

// A directory or log file looser than 0700 or 0600 is refused, and left
// as it was.
func TestOpenStoresRefusesLooseModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "raft")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStores(dir, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "want at most 0700") {
		t.Fatalf("loose dir: %v", err)
	}
	if m := modes(t, dir)["."]; m != 0o755 {
		t.Errorf("dir mode changed to %#o", m)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, LogFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, LogFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStores(dir, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "want at most 0600") {
		t.Fatalf("loose log file: %v", err)
	}
}

// LANConfig is a valid raft config with the documented timeouts, and
// raft's log lines reach the zap logger with their fields.
func TestLANConfigAndLogger(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	c := LANConfig("n-a", zap.New(core))
	if err := raft.ValidateConfig(c); err != nil {
		t.Fatal(err)
	}
	if c.LocalID != "n-a" || c.HeartbeatTimeout != HeartbeatTimeout || c.ElectionTimeout != ElectionTimeout ||
		c.LeaderLeaseTimeout != LeaderLeaseTimeout || c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		t.Errorf("config %+v", c)
	}
	if worst := 2*HeartbeatTimeout + 2*ElectionTimeout; worst > 3*time.Second {
		t.Errorf("worst case without a split vote %v, want within 3 s", worst)
	}
	l := c.Logger.With("node", "n-a").Named("sub")
	l.Warn("heartbeat failed", "peer", "n-b", "dangling")
	l.Trace("trace goes to debug")
	if l.Name() != "raft.sub" || !l.IsTrace() || l.GetLevel() != 2 /* hclog.Debug */ {
		t.Errorf("name %q, trace %v, level %v", l.Name(), l.IsTrace(), l.GetLevel())
	}
	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("logged %d entries, want 2", len(entries))
	}
	e := entries[0]
	fields := e.ContextMap()
	if e.Level != zapcore.WarnLevel || e.LoggerName != "raft.sub" || e.Message != "heartbeat failed" ||
		fields["node"] != "n-a" || fields["peer"] != "n-b" || fields["extra"] != "dangling" {
		t.Errorf("entry %+v, fields %v", e.Entry, fields)
	}
	if entries[1].Level != zapcore.DebugLevel {
		t.Errorf("trace logged at %v", entries[1].Level)
	}
}
