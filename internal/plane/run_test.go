package plane

import (
	"context"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
)

func TestRunReturnsNilOnCancel(t *testing.T) {
	r, _ := newRig(t, 8)
	r.cfg.Tick = time.Millisecond
	r.cfg.DeadAfter = time.Second
	r.restart()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.c.Run(ctx) }()
	// Wait until a tick has run: the node is alive.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.c.mu.Lock()
		alive := r.c.nodes[r.targets[0].ID].alive
		r.c.mu.Unlock()
		if alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no tick ran")
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}

func TestSetTargetsAndApplyConfig(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	r.tick()
	// Demote one target below the floor: it keeps its facts, loses
	// eligibility.
	ts := append([]Target(nil), r.targets...)
	ts[0].Tier = engine.TrustDiscovered
	if err := r.c.SetTargets(ts); err != nil {
		t.Fatal(err)
	}
	rep := r.place(echo)
	if rep.Placed == nil || rep.Placed.Node != ts[1].ID {
		t.Fatalf("placed %+v, want on %s", rep.Placed, ts[1].ID)
	}
	if err := r.c.SetTargets([]Target{{ID: "x"}}); err == nil {
		t.Error("a target without key or tier accepted")
	}
	bad := r.cfg
	bad.Tick = 0
	if err := r.c.ApplyConfig(bad); err == nil {
		t.Error("invalid config applied")
	}
	if r.c.conf().Tick != r.cfg.Tick {
		t.Error("a refused config changed the controller")
	}
}

// TestTickRunsBesideALongPlace: a place that takes long holds up no tick,
// and the lifecycle leaves its placement alone until the call returns.
func TestTickRunsBesideALongPlace(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	entered := make(chan struct{})
	release := make(chan struct{})
	hook := &hookDispatcher{fakeCluster: r.cl, before: func() {
		close(entered)
		<-release
	}}
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: hook, StatePath: r.state})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan Report, 1)
	go func() {
		rep, err := c.Place(context.Background(), echo)
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	<-entered
	for range 3 {
		r.clk.Advance(r.cfg.Tick)
		if err := c.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.cl.Calls); n != 0 {
		t.Fatalf("the lifecycle sent %v while the place was under way", r.cl.Calls)
	}
	close(release)
	rep := <-done
	if rep.Placed == nil {
		t.Fatalf("not placed: %+v", rep)
	}
	if err := c.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.wantCopies("echo", 1)
}

func TestTargetsChecked(t *testing.T) {
	k1, id1 := testKey(t, 1)
	_, id2 := testKey(t, 2)
	pub := k1.Public().(ed25519.PublicKey)
	tests := []struct {
		name string
		give []Target
		want string
	}{
		{"ok", []Target{{ID: id1, Key: pub, Tier: engine.TrustPaired}}, ""},
		{"key of another node", []Target{{ID: id2, Key: pub, Tier: engine.TrustPaired}}, "its key is node"},
		{"no key", []Target{{ID: id1, Tier: engine.TrustPaired}}, "no ed25519 key"},
		{"no tier", []Target{{ID: id1, Key: pub}}, "no tier"},
		{"twice", []Target{{ID: id1, Key: pub, Tier: engine.TrustPaired}, {ID: id1, Key: pub, Tier: engine.TrustPaired}}, "given twice"},
	}
	for _, tt := range tests {
		err := checkTargets(tt.give)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestNodes(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	r.tick()
	r.cl.Kill(hs[0])
	r.step()
	got := map[string]engine.Liveness{}
	for _, n := range r.c.Nodes() {
		got[n.ID] = n.Liveness
		if n.FactsSeq == 0 {
			t.Errorf("%s: no facts", n.ID)
		}
	}
	if got[hs[0].ID] != engine.Suspect || got[hs[1].ID] != engine.Alive {
		t.Errorf("liveness %v", got)
	}
}
