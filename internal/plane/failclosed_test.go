package plane

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeld/nodeld/internal/chain"
)

// brokenChain refuses every append.
type brokenChain struct{}

func (brokenChain) Append(string, string, any) (chain.Entry, error) {
	return chain.Entry{}, errors.New("disk full")
}

func TestUnchainedDecisionNotTaken(t *testing.T) {
	r, _ := newRig(t, 8)
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: brokenChain{}, Dispatcher: r.cl, StatePath: r.state})
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(context.Background())
	if _, err := c.Place(context.Background(), echo); err == nil {
		t.Fatal("Place with a broken chain: no error")
	}
	if len(r.cl.Calls) != 0 || len(c.Placements()) != 0 {
		t.Fatalf("calls %v, placements %d", r.cl.Calls, len(c.Placements()))
	}
}

func TestUnpersistedPlacementNotDispatched(t *testing.T) {
	r, _ := newRig(t, 8)
	state := filepath.Join(t.TempDir(), "missing", "controller.json")
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: r.cl, StatePath: state})
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(context.Background())
	rep, err := c.Place(context.Background(), echo)
	if err == nil || rep.Placed != nil {
		t.Fatalf("Place without a writable state file: %+v, %v", rep, err)
	}
	if len(r.cl.Calls) != 0 || len(c.Placements()) != 0 {
		t.Fatalf("calls %v, placements %d", r.cl.Calls, len(c.Placements()))
	}
}

func FuzzLoadState(f *testing.F) {
	f.Add([]byte(`{"version":1,"placements":[]}`))
	f.Add([]byte(`{"version":1,"placements":[{"decision_id":"` + string(make64('a')) + `","node":"n","life":"placed","candidates":[{"node":"n","variant":"v"}],"cursor":0}]}`))
	f.Add([]byte(`{"version":3}`))
	f.Add([]byte(`{"version":2,"packages":[{"id":"echo","version":"1.0.0","kind":"service","manifest_hash":"h","reserved":{"cpu":[1,0]}}],"placements":[{"decision_id":"` + string(make64('b')) + `","package":0,"node":"n","variant":"cpu","instance":"echo-1","life":"placed","order":{"name":"e","package_dir":"/p","start":true}},{"decision_id":"` + string(make64('c')) + `","package":0,"workload":"w","node":"n","variant":"cpu","instance_id":"x","reserved":[2,3],"life":"unsettled","candidates":[{"node":"n","variant":"cpu"}]}]}`))
	f.Add([]byte(`{"version":1,"placements":[],"declarations":[{"name":"chat","attempts":2,"next_attempt":"2026-03-01T12:00:00Z","last_error":"x"}]}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "controller.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := loadState(path)
		if err != nil {
			if !errors.Is(err, ErrBadState) {
				t.Fatalf("error %v does not wrap ErrBadState", err)
			}
			return
		}
		// What loads encodes and loads again to the same placements.
		b, err := encodeState(st.Placements, st.Declarations, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := loadState(path)
		if err != nil {
			t.Fatalf("re-encoded state refused: %v", err)
		}
		if len(again.Placements) != len(st.Placements) || len(again.Declarations) != len(st.Declarations) {
			t.Fatalf("%d placements and %d declarations, then %d and %d",
				len(st.Placements), len(st.Declarations), len(again.Placements), len(again.Declarations))
		}
	})
}

func make64(c byte) []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return b
}
