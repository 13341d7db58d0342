package plane

import (
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// TestExplainShowsAffinityPerfAndTies: the explanation names the order's
// prefer and avoid, says whether the node chosen was preferred or the
// better-ranked one avoided, gives the measured milliseconds behind each
// perf score, and says how equal scores are ordered.
func TestExplainShowsAffinityPerfAndTies(t *testing.T) {
	r, hs := newRig(t, 8, 8, 8)
	dir := "/pkg/chat"
	r.cl.AddPackage(dir, "chat", pkg.KindService, 1)
	r.cl.Mu.Lock()
	r.cl.Pkgs[dir].Manifest.PerfTarget = &pkg.PerfTarget{ID: "perf.infer.chat", Param: "metric",
		ParamValue: grammar.StringValue("ttfb_ms"), Better: grammar.PerfBetterLower}
	r.cl.Mu.Unlock()
	measure := func(ms float64) facts.Capability {
		return facts.Capability{ID: "perf.infer.chat", Provenance: grammar.ProvenanceMeasured, State: grammar.StateAvailable,
			Attrs: map[string]grammar.Value{"metric": grammar.StringValue("ttfb_ms"), "value": grammar.FloatValue(ms)}}
	}
	// Hosts that sign capability records: memory, runtime, and the
	// measured speed.
	records := func(ms float64) func(h *planetest.Host) {
		return func(h *planetest.Host) {
			h.Facts.Capabilities = []facts.Capability{
				capRecord("mem.system", grammar.ProvenanceProbed, grammar.StateAvailable, gv{"total": grammar.IntValue(8 << 30), "free": grammar.IntValue(8 << 30)}),
				capRecord("runtime.process", grammar.ProvenanceProbed, grammar.StateAvailable, nil),
				measure(ms),
			}
		}
	}
	r.cl.Set(hs[0], records(412))
	r.cl.Set(hs[1], records(120))
	r.tick()

	plain := r.place(Order{PackageDir: dir, DryRun: true})
	best := plain.Decision.Chosen.Node
	ex := plain.Explain()
	for _, want := range []string{
		"perf: perf.infer.chat metric=ttfb_ms (lower is better): ",
		hs[0].ID + " measured 412 (perf score ",
		hs[1].ID + " measured 120 (perf score ",
		hs[2].ID + " unmeasured",
		"ties: candidates of equal tier and score rank by node id, lowest first",
	} {
		if !strings.Contains(ex, want) {
			t.Errorf("explanation lacks %q:\n%s", want, ex)
		}
	}
	if best != hs[1].ID {
		t.Fatalf("the fastest node %s was not chosen:\n%s", hs[1].ID, ex)
	}
	last := plain.Decision.Candidates[2].Node

	ex = r.place(Order{PackageDir: dir, DryRun: true, Prefer: []string{last}}).Explain()
	for _, want := range []string{"prefer: " + last + "   avoid: -", "affinity: " + last + " chosen because it is preferred (the best-ranked is " + best + ")"} {
		if !strings.Contains(ex, want) {
			t.Errorf("explanation with prefer lacks %q:\n%s", want, ex)
		}
	}
	rep := r.place(Order{PackageDir: dir, DryRun: true, Avoid: []string{best}})
	second := rep.Decision.Chosen.Node
	if want := "affinity: " + second + " chosen because the better-ranked " + best + " is avoided"; !strings.Contains(rep.Explain(), want) {
		t.Errorf("explanation with avoid lacks %q:\n%s", want, rep.Explain())
	}
}
