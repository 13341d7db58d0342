package lifecycle

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// order records the order in which components return.
type order struct {
	mu    sync.Mutex
	names []string
}

func (o *order) add(name string) {
	o.mu.Lock()
	o.names = append(o.names, name)
	o.mu.Unlock()
}

func (o *order) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.names)
}

// waits is a component that returns once ctx ends, after hold (a drain).
func waits(o *order, name string, hold time.Duration) Component {
	return Component{Name: name, Run: func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(hold)
		o.add(name)
		return nil
	}}
}

// TestGroupStopsStageByStage: at ctx's end the first stage stops first;
// the second keeps running until every component of the first has
// returned, however long its drain takes.
func TestGroupStopsStageByStage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o order
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- Group{Log: zaptest.NewLogger(t)}.Run(ctx,
				[]Component{waits(&o, "proxy", 3*time.Second), waits(&o, "supervise", 0)},
				[]Component{waits(&o, "mesh", 0), waits(&o, "host", 0)})
		}()
		synctest.Wait()
		if got := o.get(); len(got) != 0 {
			t.Fatalf("returned before the stop: %v", got)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		got := o.get()
		if len(got) != 4 || !slices.Equal(sortedPair(got[:2]), []string{"proxy", "supervise"}) {
			t.Fatalf("stop order %v: want the first stage (proxy, supervise) before the second", got)
		}
	})
}

func sortedPair(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestGroupFirstErrorStopsAll: a failing component of the second stage
// stops the first and then the rest, and its error is Run's.
func TestGroupFirstErrorStopsAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o order
		boom := errors.New("mesh listener gone")
		err := Group{}.Run(t.Context(),
			[]Component{waits(&o, "proxy", 0)},
			[]Component{waits(&o, "host", 0), {Name: "mesh", Run: func(context.Context) error { return boom }}})
		if !errors.Is(err, boom) {
			t.Fatalf("Run = %v, want %v", err, boom)
		}
		if got := o.get(); !slices.Equal(got, []string{"proxy", "host"}) {
			t.Fatalf("returned %v, want proxy then host", got)
		}
	})
}

// TestSupervisorReadyReloadWatchdog: the conditions become ready in
// order, then systemd hears READY=1; a hup reloads between RELOADING=1
// and READY=1; the watchdog is pinged only while Alive; the stop takes
// the draining condition's readiness back and says STOPPING=1.
func TestSupervisorReadyReloadWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o order // readiness changes and notifications, in order
		admin, proxy := make(chan struct{}), make(chan struct{})
		alive := true
		var mu sync.Mutex
		s := &Supervisor{
			Conditions: []Condition{{"admin", admin}, {"proxy", proxy}},
			SetReady: func(name string, ok bool) {
				if ok {
					o.add("ready " + name)
				} else {
					o.add("unready " + name)
				}
			},
			Draining: "proxy",
			Alive:    func() bool { mu.Lock(); defer mu.Unlock(); return alive },
			Reload:   func() { o.add("reload") },
			Log:      zap.NewNop(),
			Notify:   func(state string) error { o.add(state); return nil },
			Watchdog: func() time.Duration { return 10 * time.Second },
		}
		hup := make(chan os.Signal, 1)
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, hup) }()
		close(proxy) // ready early, but admin is waited for first
		synctest.Wait()
		if got := o.get(); len(got) != 0 {
			t.Fatalf("before admin: %v", got)
		}
		close(admin)
		synctest.Wait()
		hup <- os.Interrupt
		synctest.Wait()
		time.Sleep(5 * time.Second) // one watchdog ping
		synctest.Wait()
		mu.Lock()
		alive = false
		mu.Unlock()
		time.Sleep(5 * time.Second) // none while not alive
		synctest.Wait()
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := []string{"ready admin", "ready proxy", daemon.SdNotifyReady,
			daemon.SdNotifyReloading, "reload", daemon.SdNotifyReady,
			daemon.SdNotifyWatchdog, "unready proxy", daemon.SdNotifyStopping}
		if got := o.get(); !slices.Equal(got, want) {
			t.Fatalf("got %q\nwant %q", got, want)
		}
	})
}
