package lifecycle

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// StopWarnEvery is how often a group that is stopping names the
// components it still waits for, by default.
const StopWarnEvery = 5 * time.Second

// Component is one long-running part of the daemon: Run owns every
// goroutine it starts and returns nil once ctx ends.
type Component struct {
	// Name is what a slow stop logs.
	Name string
	Run  func(ctx context.Context) error
}

// Group runs the daemon's components (Run).
type Group struct {
	// Log names, during a slow stop, the components not yet returned.
	Log *zap.Logger
	// WarnEvery is how often; 0 means StopWarnEvery.
	WarnEvery time.Duration
}

// Run starts every component of every stage at once and returns when all
// have returned: at ctx's end, or when one fails (the first error, which
// stops all). The first stage runs on ctx; each later stage runs on a
// context that ends once every component of the stage before it has
// returned, so a stop goes stage by stage (the proxy drains its clients'
// requests while the instances and links they use stay up).
//
// A stop that takes longer than WarnEvery is logged every WarnEvery with
// the components that have not returned yet, so that a stop that hangs
// (and that systemd ends with SIGKILL) says where.
func (g Group) Run(ctx context.Context, stages ...[]Component) error {
	eg, gctx := errgroup.WithContext(ctx)
	var left stillRunning
	stageCtx := gctx
	for i, stage := range stages {
		sctx := stageCtx
		var members sync.WaitGroup
		for _, c := range stage {
			left.add(c.Name)
			members.Add(1)
			eg.Go(func() error {
				defer members.Done()
				defer left.done(c.Name)
				return c.Run(sctx)
			})
		}
		if i < len(stages)-1 {
			next, stopNext := context.WithCancel(context.WithoutCancel(gctx))
			defer stopNext()
			eg.Go(func() error {
				members.Wait()
				stopNext()
				return nil
			})
			stageCtx = next
		}
	}
	every := g.WarnEvery
	if every <= 0 {
		every = StopWarnEvery
	}
	log := g.Log
	if log == nil {
		log = zap.NewNop()
	}
	stopped, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		left.watch(gctx, stopped, every, log)
	}()
	err := eg.Wait()
	close(stopped)
	<-watched
	return err
}

// stillRunning is the names of the components that have not returned.
type stillRunning struct {
	mu    sync.Mutex
	names []string // guarded by mu; in start order
}

func (s *stillRunning) add(name string) {
	s.mu.Lock()
	s.names = append(s.names, name)
	s.mu.Unlock()
}

func (s *stillRunning) done(name string) {
	s.mu.Lock()
	if i := slices.Index(s.names, name); i >= 0 {
		s.names = slices.Delete(s.names, i, i+1)
	}
	s.mu.Unlock()
}

func (s *stillRunning) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.names)
}

// watch waits for ctx's end (the stop) and then, every every until
// stopped is closed, logs the components still running.
func (s *stillRunning) watch(ctx context.Context, stopped <-chan struct{}, every time.Duration, log *zap.Logger) {
	select {
	case <-ctx.Done():
	case <-stopped:
		return
	}
	began := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stopped:
			return
		case <-t.C:
		}
		log.Warn("still stopping", zap.Strings("waiting_for", s.list()), zap.Duration("after", time.Since(began)))
	}
}
