package raftmesh

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// LogFile is the BoltDB file of the raft log and stable store, in the
// directory OpenStores is given; snapshots go under "snapshots" there.
const LogFile = "raft.db"

// boltLockWait bounds the wait for the BoltDB file lock: another process
// holding it (a second daemon on the same data_dir) is an error, not a
// hang.
const boltLockWait = time.Second

// Stores are raft's log, stable and snapshot stores in one directory.
type Stores struct {
	// Log and Stable are the same BoltDB store.
	Log    raft.LogStore
	Stable raft.StableStore
	// Snapshots keeps SnapshotRetain snapshots.
	Snapshots raft.SnapshotStore

	bolt *raftboltdb.BoltStore
}

// OpenStores opens (creating them) raft's stores in dir: the directory is
// 0700 and its files 0600. A directory or log file that exists with
// looser modes is refused, not changed. raft's file snapshot store writes
// its files with the process umask; they are made 0600 (their directories
// 0700) as each snapshot is closed and when the stores are opened, and
// dir's 0700 keeps them from other users meanwhile.
func OpenStores(dir string, z *zap.Logger) (*Stores, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raft dir: %w", err)
	}
	if err := refuseLoose(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LogFile)
	if err := refuseLoose(path, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: boltLockWait}})
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w", path, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, SnapshotRetain, NewHCLogger(z, "raft-snapshots"))
	if err != nil {
		_ = bolt.Close()
		return nil, fmt.Errorf("open raft snapshots in %s: %w", dir, err)
	}
	st := &snapshotStore{FileSnapshotStore: snaps, dir: filepath.Join(dir, "snapshots")}
	if err := st.tighten(); err != nil {
		_ = bolt.Close()
		return nil, err
	}
	return &Stores{Log: bolt, Stable: bolt, Snapshots: st, bolt: bolt}, nil
}

// Close closes the log store.
func (s *Stores) Close() error { return s.bolt.Close() }

// refuseLoose returns an error when path grants more than want.
func refuseLoose(path string, want fs.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("raft store %s: %w", path, err)
	}
	if got := fi.Mode().Perm(); got&^want != 0 {
		return fmt.Errorf("raft store %s has mode %#o, want at most %#o (chmod it)", path, got, want)
	}
	return nil
}

// snapshotStore is raft's file snapshot store, its files made 0600.
type snapshotStore struct {
	*raft.FileSnapshotStore
	dir string
}

func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &snapshotSink{SnapshotSink: sink, st: s}, nil
}

// tighten makes every file under the snapshots directory 0600 and every
// directory 0700.
func (s *snapshotStore) tighten() error {
	err := filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a snapshot reaped while walking
			}
			return err
		}
		mode := fs.FileMode(0o600)
		if d.IsDir() {
			mode = 0o700
		}
		if err := os.Chmod(path, mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("raft snapshots modes: %w", err)
	}
	return nil
}

type snapshotSink struct {
	raft.SnapshotSink
	st *snapshotStore
}

// Close completes the snapshot, then tightens the modes.
func (k *snapshotSink) Close() error {
	err := k.SnapshotSink.Close()
	return errors.Join(err, k.st.tighten())
}
