package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"
)

// outageInstance is a model server that can be taken down: while down its
// health checks and starts are refused connections, as with an Ollama
// daemon killed under a managed instance.
type outageInstance struct {
	mu   sync.Mutex
	down bool
	exit chan ExitStatus
}

func (o *outageInstance) setDown(down bool) {
	o.mu.Lock()
	o.down = down
	o.mu.Unlock()
}

var errRefused = fmt.Errorf("GET /api/ps: %w", os.NewSyscallError("connect", syscall.ECONNREFUSED))

func (o *outageInstance) Start(context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return errRefused
	}
	o.exit = make(chan ExitStatus, 1)
	return nil
}

func (o *outageInstance) Stop(context.Context, time.Duration) error { return nil }

func (o *outageInstance) Health(context.Context) (Health, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return HealthDown, errRefused
	}
	return HealthUp, nil
}

func (o *outageInstance) Wait() <-chan ExitStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.exit
}

// TestSupervisorRidesOutAFortySecondOutage: with the default health
// checks and restart budget, a model server that is down for 40 s (a
// daemon killed and started again) leaves running within one health
// interval, and is running again, not failed, once it is back.
func TestSupervisorRidesOutAFortySecondOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inst := &outageInstance{}
		var (
			mu     sync.Mutex
			states []State
		)
		s, err := NewSupervisor(inst, SupervisorConfig{}, SupervisorDeps{
			Logger: zaptest.NewLogger(t),
			OnChange: func(st State, _ Health) {
				mu.Lock()
				states = append(states, st)
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(12 * time.Second) // running through two checks
		synctest.Wait()
		if st, _, _ := s.State(); st != StateRunning {
			t.Fatalf("state %s before the outage", st)
		}
		inst.setDown(true)
		time.Sleep(DefaultHealthInterval)
		synctest.Wait()
		if st, _, reason := s.State(); st != StateUnhealthy {
			t.Errorf("state %s (%s) one health interval into the outage, want unhealthy", st, reason)
		}
		time.Sleep(40*time.Second - DefaultHealthInterval)
		inst.setDown(false)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		st, restarts, reason := s.State()
		if st != StateRunning {
			t.Errorf("state %s (%s) after the server came back, want running", st, reason)
		}
		if restarts == 0 || restarts > DefaultRestartPolicy().Max {
			t.Errorf("%d restarts", restarts)
		}
		mu.Lock()
		for _, st := range states {
			if st == StateFailed {
				t.Errorf("failed during a 40 s outage: %v", states)
				break
			}
		}
		mu.Unlock()
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
	})
}
