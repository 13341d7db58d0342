package chain

import (
	"fmt"
	"io/fs"
	"os"
	"sync"
)

// faultFS opens real files through Options.OpenFile and fails the calls
// its hooks choose. Each hook gets the 1-based number of the call of its
// kind across all files and returns nil to let the call through. Hooks and
// counters are guarded by mu; set them with arm.
type faultFS struct {
	mu sync.Mutex
	// onOpen fails an open.
	onOpen func(n int) error
	// onWrite fails a write after writing its first keep bytes.
	onWrite func(n int) (keep int, err error)
	// onSync fails a sync.
	onSync func(n int) error
	// onTruncate fails a truncation.
	onTruncate func(n int) error

	opens, writes, syncs, truncates int
	files                           []*faultFile
}

// arm changes hooks under the lock.
func (s *faultFS) arm(f func(s *faultFS)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// clear removes every hook.
func (s *faultFS) clear() {
	s.arm(func(s *faultFS) { s.onOpen, s.onWrite, s.onSync, s.onTruncate = nil, nil, nil, nil })
}

// failNextWrite makes the next write keep its first keep bytes and fail.
func (s *faultFS) failNextWrite(keep int, err error) {
	s.arm(func(s *faultFS) {
		at := s.writes + 1
		s.onWrite = func(n int) (int, error) {
			if n == at {
				return keep, err
			}
			return 0, nil
		}
	})
}

// failNextSync makes the next sync fail.
func (s *faultFS) failNextSync(err error) {
	s.arm(func(s *faultFS) {
		at := s.syncs + 1
		s.onSync = func(n int) error {
			if n == at {
				return err
			}
			return nil
		}
	})
}

// always returns a hook failing every call with err.
func always(err error) func(int) error { return func(int) error { return err } }

func (s *faultFS) open(name string, flag int, perm fs.FileMode) (File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens++
	if s.onOpen != nil {
		if err := s.onOpen(s.opens); err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	ff := &faultFile{File: f, fs: s}
	s.files = append(s.files, ff)
	return ff, nil
}

// counts returns the number of opens, writes, syncs and truncations.
func (s *faultFS) counts() [4]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return [4]int{s.opens, s.writes, s.syncs, s.truncates}
}

// misuse lists every use of a descriptor that the chain must never make:
// any call after Close, and a sync after the descriptor returned an error.
func (s *faultFS) misuse() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i, f := range s.files {
		if f.usedAfterClose > 0 {
			out = append(out, fmt.Sprintf("file %d used %d times after Close", i, f.usedAfterClose))
		}
		if f.syncedAfterError > 0 {
			out = append(out, fmt.Sprintf("file %d synced %d times after an error", i, f.syncedAfterError))
		}
	}
	return out
}

// state returns, per file opened, whether it returned an error and whether
// it is closed.
func (s *faultFS) state() (errored, closed []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		errored = append(errored, f.errored)
		closed = append(closed, f.closed)
	}
	return errored, closed
}

// faultFile is one descriptor opened through a faultFS. Its fields are
// guarded by fs.mu.
type faultFile struct {
	*os.File
	fs *faultFS

	errored          bool // a write, sync or truncation returned an error
	closed           bool
	usedAfterClose   int
	syncedAfterError int
}

// enter counts a use of the descriptor; called with fs.mu held.
func (f *faultFile) enter() {
	if f.closed {
		f.usedAfterClose++
	}
}

func (f *faultFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.enter()
	f.fs.writes++
	if f.fs.onWrite != nil {
		if keep, err := f.fs.onWrite(f.fs.writes); err != nil {
			n, _ := f.File.Write(p[:min(keep, len(p))])
			f.errored = true
			return n, err
		}
	}
	n, err := f.File.Write(p)
	if err != nil {
		f.errored = true
	}
	return n, err
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.enter()
	f.fs.syncs++
	if f.errored {
		f.syncedAfterError++
	}
	if f.fs.onSync != nil {
		if err := f.fs.onSync(f.fs.syncs); err != nil {
			f.errored = true
			return err
		}
	}
	err := f.File.Sync()
	if err != nil {
		f.errored = true
	}
	return err
}

func (f *faultFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.enter()
	f.fs.truncates++
	if f.fs.onTruncate != nil {
		if err := f.fs.onTruncate(f.fs.truncates); err != nil {
			f.errored = true
			return err
		}
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Stat() (fs.FileInfo, error) {
	f.fs.mu.Lock()
	f.enter()
	f.fs.mu.Unlock()
	return f.File.Stat()
}

func (f *faultFile) Close() error {
	f.fs.mu.Lock()
	f.enter()
	f.closed = true
	f.fs.mu.Unlock()
	return f.File.Close()
}
