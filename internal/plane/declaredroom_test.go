package plane

import (
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/pkg"
	"testing"

	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// A model server that does not use the memory it declares (echo-llm
// standing in for a model, or one still loading) leaves the node's free
// memory as it was: the controller still never gives the node more than
// its memory by declared resources. An 8 GiB node, 7 GiB free whatever
// runs: on-demand a (6 GiB) placed, b (6 GiB) demanded does not fit.
func TestDeclaredMemoryNeverOvercommitted(t *testing.T) {
	r, h := swapRig(t)
	setChooser(t, nil)
	r.cl.Set(h, func(h *planetest.Host) { h.Facts.MemTotalBytes, h.Facts.MemFreeBytes = 8<<30, 7<<30 })
	ctx := t.Context()
	if _, err := r.c.Demand(ctx, "a", h.ID); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.clk.Advance(odIdle.MinResidency)
		r.tick()
	}
	r.wantCopies("llma", 1)
	if _, err := r.c.Demand(ctx, "b", h.ID); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.tick()
	}
	r.wantCopies("llmb", 0)
}

func TestDeclaredSqueeze(t *testing.T) {
	// Tested through the view above; here the arithmetic's edges.
	for _, tc := range []struct {
		total, free, pend, used, want uint64
	}{
		{8, 7, 0, 6, 5},  // room 7, declared room 2
		{8, 7, 6, 6, 0},  // pending already counts it
		{8, 2, 0, 6, 0},  // the facts show it in use
		{0, 7, 0, 6, 0},  // no total known
		{8, 7, 0, 10, 7}, // declared beyond the total: no room at all
	} {
		f := planetestFacts(tc.total<<30, tc.free<<30)
		got, ok := declaredSqueeze(f, res(tc.pend), res(tc.used))
		if got.HostBytes != tc.want<<30 || ok != (tc.want > 0) {
			t.Errorf("%+v: squeeze %d %v", tc, got.HostBytes>>30, ok)
		}
	}
}

func planetestFacts(total, free uint64) facts.Facts {
	return facts.Facts{OS: "linux", Arch: "amd64", MemTotalBytes: total, MemFreeBytes: free}
}

// res is one reservation of gib GiB of host memory (none for 0).
func res(gib uint64) []engine.Resources {
	if gib == 0 {
		return nil
	}
	return []engine.Resources{{HostBytes: gib << 30}}
}

// The view gives each node its free memory in Memory as well as in its
// prepared profile: the swap's choice (engine.EvictNode capacities) reads
// Memory, and a node seen with none has nothing to free into.
func TestViewCarriesMemory(t *testing.T) {
	r, h := swapRig(t)
	r.cl.Set(h, func(h *planetest.Host) { h.Facts.MemTotalBytes, h.Facts.MemFreeBytes = 8<<30, 7<<30 })
	r.tick()
	nodes := r.c.rec.view(r.clk.Now(), pkg.KindInference, "a")
	if len(nodes) != 1 || nodes[0].Memory.HostFree != 7<<30 {
		t.Fatalf("view memory %+v, want 7 GiB free", nodes)
	}
}
