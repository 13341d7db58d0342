package plane

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// observed rebuilds r's controller with a metrics registry and a logger
// whose warn lines the test reads.
func (r *rig) observed() *observer.ObservedLogs {
	r.t.Helper()
	core, logs := observer.New(zapcore.WarnLevel)
	c, err := New(r.cfg, r.targets, Deps{Now: r.clk.Now, Chain: r.chain, Dispatcher: r.cl, StatePath: r.state,
		Store: r.store, Registerer: prometheus.NewRegistry(), Logger: zap.New(core)})
	if err != nil {
		r.t.Fatal(err)
	}
	r.c = c
	return logs
}

// TestDeclarationsShowUnplaceable: a declaration whose package is not in
// the store is listed with its state and reason, counted by the gauge,
// and logged at warn once per change of reason, not once per attempt;
// once it places, it is placed and its reason is gone.
func TestDeclarationsShowUnplaceable(t *testing.T) {
	r, _ := newRig(t, 8)
	r.addVersion("echo", "1.0.0", 1, nil)
	r.cfg.Workloads = []Workload{chat, {Name: "ghost", Package: "nope"}}
	logs := r.observed()
	for range 20 {
		r.step()
	}
	ds := r.c.Declarations()
	if len(ds) != 2 || ds[0].Name != "chat" || ds[1].Name != "ghost" {
		t.Fatalf("declarations %+v", ds)
	}
	if d := ds[0]; d.State != DeclPlaced || d.Placed != 1 || d.Reason != "" {
		t.Errorf("chat: %+v", d)
	}
	g := ds[1]
	if g.State != DeclUnplaceable || !strings.Contains(g.Reason, "nope") || g.Since.IsZero() || g.Attempts < 2 {
		t.Errorf("ghost: %+v", g)
	}
	gauge := func(state string) float64 { return testutil.ToFloat64(r.c.met.declarations.WithLabelValues(state)) }
	if gauge(DeclPlaced) != 1 || gauge(DeclUnplaceable) != 1 || gauge(DeclPending) != 0 {
		t.Errorf("gauge placed %v unplaceable %v pending %v", gauge(DeclPlaced), gauge(DeclUnplaceable), gauge(DeclPending))
	}
	warns := logs.FilterMessage("declared workload not placed").All()
	if len(warns) != 1 || warns[0].ContextMap()["workload"] != "ghost" {
		t.Fatalf("%d warn lines over %d attempts, want 1: %+v", len(warns), g.Attempts, warns)
	}

	// Its package arrives: placed at the next attempt, reason cleared.
	r.addVersion("nope", "1.0.0", 1, nil)
	for range 40 {
		r.step()
		if r.c.Declarations()[1].State == DeclPlaced {
			break
		}
	}
	if g := r.c.Declarations()[1]; g.State != DeclPlaced || g.Reason != "" || !g.Since.IsZero() {
		t.Fatalf("ghost once its package is stored: %+v", g)
	}
	if gauge(DeclPlaced) != 2 || gauge(DeclUnplaceable) != 0 {
		t.Errorf("gauge placed %v unplaceable %v", gauge(DeclPlaced), gauge(DeclUnplaceable))
	}
}
