package runner

import (
	"context"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

// recordingLauncher adds a variable to the environment, remembers the pid
// started reports, and says the run was OOM-killed when oom is set.
type recordingLauncher struct {
	pid   atomic.Int64
	ended atomic.Int32
	oom   bool
}

func (l *recordingLauncher) Wrap(cmd *exec.Cmd) (func(int) error, func() bool, error) {
	cmd.Env = append(cmd.Env, "WRAPPED=1")
	return func(pid int) error { l.pid.Store(int64(pid)); return nil },
		func() bool { l.ended.Add(1); return l.oom }, nil
}

// A Launcher wraps every run: started gets the run's pid, ended is called
// once the run is reaped, and an OOM kill it reports is in the exit
// status and its reason.
func TestManagedLauncher(t *testing.T) {
	l := &recordingLauncher{oom: true}
	spec := echoSpec(t, "127.0.0.1")
	m := newTestManagedDeps(t, spec, ManagedDeps{Launcher: l})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.pid.Load() <= 0 {
		t.Fatal("started was not called with the pid")
	}
	if err := m.Stop(context.Background(), DefaultStopGrace); err != nil {
		t.Fatal(err)
	}
	st := recvExit(t, m.Wait())
	if !st.OOMKilled || !strings.Contains(st.String(), ReasonOOMKilled) {
		t.Errorf("exit %+v (%s), want an OOM kill", st, st)
	}
	if n := l.ended.Load(); n != 1 {
		t.Errorf("ended called %d times, want 1", n)
	}
}
