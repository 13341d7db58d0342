package chain

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// recoverEnv is a chain opened through a faultFS, on a manual clock, with
// its own registry and observed logs. It holds the genesis and two
// entries.
type recoverEnv struct {
	c    *Chain
	path string
	fs   *faultFS
	clk  *manualClock
	reg  *prometheus.Registry
	logs *observer.ObservedLogs
}

func newRecoverEnv(t *testing.T) *recoverEnv {
	t.Helper()
	env := &recoverEnv{
		path: filepath.Join(t.TempDir(), "chain.log"),
		fs:   &faultFS{},
		clk:  newManualClock(),
		reg:  prometheus.NewRegistry(),
	}
	core, logs := observer.New(zap.DebugLevel)
	env.logs = logs
	c, _, err := Open(env.path, testKey(1), Options{Now: env.clk.Now, Logger: zap.New(core), Registerer: env.reg, OpenFile: env.fs.open})
	if err != nil {
		t.Fatal(err)
	}
	env.c = c
	t.Cleanup(func() {
		c.Close()
		for _, m := range env.fs.misuse() {
			t.Error(m)
		}
	})
	for i := range 2 {
		if _, err := c.Append("test", "test.event", map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	return env
}

// health is what the chain says about itself.
type health struct {
	Writable         bool // Healthy() == nil
	Since            time.Time
	Recovered        bool
	Entries          uint64
	AppendErrors     float64
	RecoveriesOK     float64
	RecoveriesFailed float64
	WritableGauge    float64
}

func (env *recoverEnv) health(t *testing.T) health {
	t.Helper()
	m := env.c.m
	h := health{
		Entries:          env.c.Entries(),
		AppendErrors:     testutil.ToFloat64(m.appendErrors),
		RecoveriesOK:     testutil.ToFloat64(m.recoveries.WithLabelValues(recoveryOK)),
		RecoveriesFailed: testutil.ToFloat64(m.recoveries.WithLabelValues(recoveryFailed)),
		WritableGauge:    testutil.ToFloat64(m.writable),
	}
	err := env.c.Healthy()
	var nw *NotWritableError
	switch {
	case err == nil:
		h.Writable = true
	case errors.As(err, &nw):
		if !errors.Is(err, ErrWriteFailed) {
			t.Errorf("Healthy() = %v, does not match ErrWriteFailed", err)
		}
		h.Since, h.Recovered = nw.Since, nw.Recovered
	default:
		t.Fatalf("Healthy() = %v, want nil or a *NotWritableError", err)
	}
	return h
}

// logged counts the log entries with msg at level.
func (env *recoverEnv) logged(msg string, level zapcore.Level) int {
	n := 0
	for _, e := range env.logs.FilterMessage(msg).All() {
		if e.Level == level {
			n++
		}
	}
	return n
}

// appendOK appends one entry that must be acknowledged with the seq and
// prev following the head, and checks the file is the bytes before plus
// exactly its line, and verifies.
func (env *recoverEnv) appendOK(t *testing.T, before []byte) Entry {
	t.Helper()
	seq, hash := env.c.Head()
	e, err := env.c.Append("test", "test.after", map[string]string{"k": "v"})
	if err != nil {
		t.Fatalf("Append after recovery = %v", err)
	}
	if e.Seq != seq+1 || e.Prev != hash {
		t.Errorf("entry after recovery has seq %d prev %s, want seq %d prev %s", e.Seq, e.Prev, seq+1, hash)
	}
	if diff := cmp.Diff(appendLine(bytes.Clone(before), &e), readFile(t, env.path)); diff != "" {
		t.Errorf("file after recovery and append (-want +got):\n%s", diff)
	}
	res, err := VerifyFile(env.path, pubOf(testKey(1)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(e, res.Head); diff != "" || res.Entries != e.Seq {
		t.Errorf("verified %d entries, head (-want +got):\n%s", res.Entries, diff)
	}
	return e
}

// TestRecoverAfterWriteError fails one write or sync: the append is
// refused, the file is cut back to the acknowledged entries through a new
// descriptor (the failed one is closed and never synced again), and the
// next append lands with the right seq and prev.
func TestRecoverAfterWriteError(t *testing.T) {
	tests := []struct {
		name    string
		arm     func(*faultFS)
		wantErr error
	}{
		{"half a line written", func(s *faultFS) { s.failNextWrite(100, syscall.ENOSPC) }, syscall.ENOSPC},
		{"nothing written", func(s *faultFS) { s.failNextWrite(0, syscall.EIO) }, syscall.EIO},
		{"whole line written, sync fails", func(s *faultFS) { s.failNextSync(syscall.EIO) }, syscall.EIO},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newRecoverEnv(t)
			before := readFile(t, env.path)
			seq, hash := env.c.Head()
			failedAt := env.clk.Advance(time.Second)
			tt.arm(env.fs)

			_, err := env.c.Append("test", "test.lost", map[string]string{"k": "v"})
			if !errors.Is(err, ErrWriteFailed) || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Append = %v, want ErrWriteFailed wrapping %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(before, readFile(t, env.path)); diff != "" {
				t.Errorf("file after the failed append (-want +got):\n%s", diff)
			}
			if s, h := env.c.Head(); s != seq || h != hash {
				t.Errorf("head moved to %d %s after a failed append", s, h)
			}
			want := health{Since: failedAt, Recovered: true, Entries: 3, AppendErrors: 1, RecoveriesOK: 1}
			if diff := cmp.Diff(want, env.health(t)); diff != "" {
				t.Errorf("health after the failure (-want +got):\n%s", diff)
			}
			errored, closed := env.fs.state()
			if diff := cmp.Diff([]bool{true, false}, errored); diff != "" {
				t.Errorf("descriptors that errored (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]bool{true, false}, closed); diff != "" {
				t.Errorf("descriptors closed (-want +got):\n%s", diff)
			}

			env.clk.Advance(time.Second)
			env.appendOK(t, before)
			want = health{Writable: true, Entries: 4, AppendErrors: 1, RecoveriesOK: 1, WritableGauge: 1}
			if diff := cmp.Diff(want, env.health(t)); diff != "" {
				t.Errorf("health after the next append (-want +got):\n%s", diff)
			}
			if n := env.logged("chain write failed; truncated to last acknowledged entry", zap.ErrorLevel); n != 1 {
				t.Errorf("logged the failure %d times, want 1", n)
			}
			if n := env.logged("chain writable again", zap.InfoLevel); n != 1 {
				t.Errorf("logged writable again %d times, want 1", n)
			}
		})
	}
}

// TestRecoveryFailsUntilCleared fails a write and then every recovery:
// appends keep being refused without writing, each making exactly one
// recovery attempt, until the fault clears; then the next append recovers,
// lands, and the file verifies with no torn tail.
func TestRecoveryFailsUntilCleared(t *testing.T) {
	tests := []struct {
		name    string
		arm     func(*faultFS)
		wantErr error
	}{
		{"reopen fails", func(s *faultFS) { s.onOpen = always(syscall.EACCES) }, syscall.EACCES},
		{"truncate fails", func(s *faultFS) { s.onTruncate = always(syscall.EROFS) }, syscall.EROFS},
		{"sync of the truncation fails", func(s *faultFS) { s.onSync = always(syscall.EIO) }, syscall.EIO},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newRecoverEnv(t)
			before := readFile(t, env.path)
			failedAt := env.clk.Advance(time.Second)
			env.fs.failNextWrite(100, syscall.ENOSPC)
			env.fs.arm(tt.arm)

			_, err := env.c.Append("test", "test.lost", nil)
			if !errors.Is(err, ErrWriteFailed) || !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Append = %v, want ErrWriteFailed wrapping ENOSPC and %v", err, tt.wantErr)
			}
			want := health{Since: failedAt, Entries: 3, AppendErrors: 1, RecoveriesFailed: 1}
			if diff := cmp.Diff(want, env.health(t)); diff != "" {
				t.Errorf("health after the failure (-want +got):\n%s", diff)
			}
			if got := readFile(t, env.path); !bytes.HasPrefix(got, before) {
				t.Errorf("acknowledged entries changed on disk")
			}

			for i := range 3 {
				env.clk.Advance(time.Second)
				c0 := env.fs.counts()
				_, err := env.c.Append("test", "test.refused", nil)
				if !errors.Is(err, ErrWriteFailed) || !errors.Is(err, tt.wantErr) {
					t.Fatalf("Append while recovery fails = %v, want ErrWriteFailed wrapping %v", err, tt.wantErr)
				}
				c1 := env.fs.counts()
				if opens, writes := c1[0]-c0[0], c1[1]-c0[1]; opens != 1 || writes != 0 {
					t.Errorf("refused append made %d opens and %d writes, want 1 recovery attempt and no write", opens, writes)
				}
				want := health{Since: failedAt, Entries: 3, AppendErrors: float64(2 + i), RecoveriesFailed: float64(2 + i)}
				if diff := cmp.Diff(want, env.health(t)); diff != "" {
					t.Errorf("health while recovery fails (-want +got):\n%s", diff)
				}
			}

			env.fs.clear()
			env.clk.Advance(time.Second)
			env.appendOK(t, before)
			want = health{Writable: true, Entries: 4, AppendErrors: 4, RecoveriesOK: 1, RecoveriesFailed: 4, WritableGauge: 1}
			if diff := cmp.Diff(want, env.health(t)); diff != "" {
				t.Errorf("health after the fault cleared (-want +got):\n%s", diff)
			}
			for _, l := range []struct {
				msg   string
				level zapcore.Level
				want  int
			}{
				{"chain write failed; recovery failed", zap.ErrorLevel, 1},
				{"chain recovery failed", zap.DebugLevel, 3},
				{"chain recovered; truncated to last acknowledged entry", zap.InfoLevel, 1},
				{"chain writable again", zap.InfoLevel, 1},
			} {
				if got := env.logged(l.msg, l.level); got != l.want {
					t.Errorf("logged %q at %v %d times, want %d", l.msg, l.level, got, l.want)
				}
			}
		})
	}
}

// TestOneRecoveryPerAppend: an append whose retried recovery succeeds but
// whose write fails again does not recover a second time; the next append
// does, and cuts the partial line that write left.
func TestOneRecoveryPerAppend(t *testing.T) {
	env := newRecoverEnv(t)
	before := readFile(t, env.path)
	failedAt := env.clk.Advance(time.Second)
	env.fs.failNextWrite(100, syscall.EIO)
	env.fs.arm(func(s *faultFS) { s.onOpen = always(syscall.EMFILE) })
	if _, err := env.c.Append("test", "test.lost", nil); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("Append = %v, want the failed recovery's EMFILE", err)
	}

	env.fs.clear()
	env.fs.failNextWrite(100, syscall.EIO)
	c0 := env.fs.counts()
	if _, err := env.c.Append("test", "test.lost", nil); !errors.Is(err, ErrWriteFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append = %v, want ErrWriteFailed wrapping EIO", err)
	}
	if c1 := env.fs.counts(); c1[0]-c0[0] != 1 || c1[1]-c0[1] != 1 {
		t.Errorf("append made %d opens and %d writes, want one recovery and one write", c1[0]-c0[0], c1[1]-c0[1])
	}
	if got := readFile(t, env.path); len(got) != len(before)+100 || !bytes.HasPrefix(got, before) {
		t.Errorf("file has %d bytes, want the %d acknowledged plus the 100 of the partial line", len(got), len(before))
	}
	want := health{Since: failedAt, Entries: 3, AppendErrors: 2, RecoveriesOK: 1, RecoveriesFailed: 1}
	if diff := cmp.Diff(want, env.health(t)); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}
	if n := env.logged("chain write failed; recovery left to the next append", zap.ErrorLevel); n != 1 {
		t.Errorf("logged the deferred recovery %d times, want 1", n)
	}

	env.appendOK(t, before)
}

// TestRecoveryRefusesForeignFile: a recovery never cuts a file that is not
// the one opened at Open, or one shorter than its acknowledged entries.
func TestRecoveryRefusesForeignFile(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string, acked []byte)
		want   string
	}{
		{
			name: "file replaced at the path",
			damage: func(t *testing.T, path string, acked []byte) {
				if err := os.Rename(path, path+".moved"); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, acked, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			want: "no longer the file opened at Open",
		},
		{
			name: "file shortened",
			damage: func(t *testing.T, path string, acked []byte) {
				if err := os.Truncate(path, int64(len(acked)-10)); err != nil {
					t.Fatal(err)
				}
			},
			want: "fewer than the",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newRecoverEnv(t)
			acked := readFile(t, env.path)
			env.fs.failNextWrite(0, syscall.EIO)
			tt.damage(t, env.path, acked)
			damaged := readFile(t, env.path)
			for range 2 {
				_, err := env.c.Append("test", "test.refused", nil)
				if !errors.Is(err, ErrWriteFailed) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Append = %v, want ErrWriteFailed saying %q", err, tt.want)
				}
			}
			if diff := cmp.Diff(damaged, readFile(t, env.path)); diff != "" {
				t.Errorf("recovery changed the file at the path (-want +got):\n%s", diff)
			}
			if h := env.health(t); h.Writable || h.Recovered {
				t.Errorf("health = %+v, want not writable, not recovered", h)
			}
		})
	}
}

// TestCloseAfterWriteFailure: Close works while a recovery is owed, and
// later appends and Healthy say ErrClosed.
func TestCloseAfterWriteFailure(t *testing.T) {
	env := newRecoverEnv(t)
	env.fs.failNextWrite(10, syscall.EIO)
	env.fs.arm(func(s *faultFS) { s.onOpen = always(syscall.EIO) })
	if _, err := env.c.Append("test", "test.lost", nil); !errors.Is(err, ErrWriteFailed) {
		t.Fatalf("Append = %v, want ErrWriteFailed", err)
	}
	if err := env.c.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if _, err := env.c.Append("test", "test.late", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	if err := env.c.Healthy(); !errors.Is(err, ErrClosed) {
		t.Errorf("Healthy after Close = %v, want ErrClosed", err)
	}
	if mfs, err := env.reg.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("metrics after Close = %d families, %v; want none", len(mfs), err)
	}
}

// TestConcurrentAppendsWithFaults appends from many goroutines while
// writes and syncs fail now and then: every acknowledged entry is in the
// file exactly once, in order, and the file verifies.
func TestConcurrentAppendsWithFaults(t *testing.T) {
	const goroutines, each = 8, 20
	env := newRecoverEnv(t)
	env.fs.arm(func(s *faultFS) {
		s.onWrite = func(n int) (int, error) {
			if n%7 == 0 {
				return n % 50, syscall.EIO
			}
			return 0, nil
		}
		s.onSync = func(n int) error {
			if n%11 == 0 {
				return syscall.EIO
			}
			return nil
		}
	})
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked = map[uint64]Entry{}
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				e, err := env.c.Append("test", "test.parallel", map[string]int{"g": g, "i": i})
				if err != nil {
					if !errors.Is(err, ErrWriteFailed) {
						t.Errorf("Append = %v, want nil or ErrWriteFailed", err)
					}
					continue
				}
				mu.Lock()
				if _, dup := acked[e.Seq]; dup {
					t.Errorf("seq %d acknowledged twice", e.Seq)
				}
				acked[e.Seq] = e
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	env.fs.clear()
	last := env.appendOK(t, readFile(t, env.path)[:env.c.size])

	if len(acked) == 0 || len(acked) == goroutines*each {
		t.Fatalf("%d of %d appends acknowledged; the faults did not bite", len(acked), goroutines*each)
	}
	lines := splitLines(readFile(t, env.path))
	if uint64(len(lines)) != last.Seq || last.Seq != uint64(3+len(acked)+1) {
		t.Fatalf("file has %d lines, last seq %d; want %d", len(lines), last.Seq, 3+len(acked)+1)
	}
	for seq, e := range acked {
		if got := mustParse(t, lines[seq-1]); !cmp.Equal(e, got) {
			t.Errorf("line %d is %+v, want the acknowledged %+v", seq, got, e)
		}
	}
}
