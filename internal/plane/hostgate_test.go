package plane

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/plane/planetest"
)

// A node whose describe shows its host disabled, or no workload host at
// all, is not a candidate, whatever it offers: the explanation says why;
// it still counts as alive (its instances are watched, not lost); and
// once its host is enabled it is a candidate again.
func TestHostDisabledOrAbsentIsNotACandidate(t *testing.T) {
	r, hs := newRig(t, 32, 16, 4)
	off, none, small := hs[0], hs[1], hs[2]
	r.cl.Set(off, func(h *planetest.Host) { h.HostOff = true })
	r.cl.Set(none, func(h *planetest.Host) { h.NoHost = true })
	r.tick()
	o := echo
	o.DryRun = true
	rep := r.place(o)
	if rep.Decision.Chosen == nil || rep.Decision.Chosen.Node != small.ID {
		t.Fatalf("chose %+v, want %s (the only enabled host):\n%s", rep.Decision.Chosen, small.ID, rep.Explain())
	}
	ex := rep.Explain()
	for _, want := range []string{"its workload host is disabled (host.enabled false)", "not a workload host: its describe shows no workload host"} {
		if !strings.Contains(ex, want) {
			t.Errorf("explanation lacks %q:\n%s", want, ex)
		}
	}
	for _, cd := range rep.Decision.Candidates {
		if cd.Node != small.ID && cd.Eligible() {
			t.Errorf("%s is eligible", cd.Node)
		}
	}
	// Placed for real: only the enabled host is tried.
	pl := r.place(echo)
	if pl.Placed == nil || pl.Placed.Node != small.ID || len(pl.Attempts) != 1 {
		t.Fatalf("placed %+v after %v", pl.Placed, outcomes(pl.Attempts))
	}
	for _, n := range r.c.NodeViews() {
		if n.Liveness.String() != "alive" {
			t.Errorf("%s is %s: a disabled host that answers is alive", n.ID, n.Liveness)
		}
	}
	// Enabled again: a candidate at the next describe.
	r.cl.Set(off, func(h *planetest.Host) { h.HostOff = false })
	r.clk.Advance(time.Second)
	r.tick()
	if got := r.rankOrder(); len(got) == 0 || got[0] != off.ID {
		t.Errorf("ranked %v after the host was enabled, want %s first", got, off.ID)
	}
}
