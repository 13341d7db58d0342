package ctlraft

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// The metrics follow the cluster: the leader is 1 and the others 0, all
// know the term, a save is timed and sized, and a leader kill counts a
// leader change on the survivors.
func TestMetricsFollowLeadership(t *testing.T) {
	h := newHarness(t, 3, 1)
	h.start()
	lead := h.waitLeader()
	h.place("one")
	for _, n := range h.ctls {
		want := 0.0
		if n == lead {
			want = 1
		}
		waitFor(t, n.Name+"'s gauges", func() bool {
			return testutil.ToFloat64(n.store.met.leader) == want && testutil.ToFloat64(n.store.met.term) == float64(lead.c.Term())
		})
	}
	var m dto.Metric
	if err := lead.store.met.save.Write(&m); err != nil || m.GetHistogram().GetSampleCount() == 0 ||
		testutil.ToFloat64(lead.store.met.stateBytes) == 0 {
		t.Fatalf("the leader's saves are not timed or sized: %v", err)
	}
	if n, err := testutil.GatherAndCount(lead.reg, "nodeld_ctlraft_commit_apply_seconds", "nodeld_ctlraft_log_entries",
		"nodeld_ctlraft_snapshot_age_seconds", "nodeld_ctlraft_leader_changes_total"); err != nil || n != 4 {
		t.Fatalf("registered: %d (%v), want 4", n, err)
	}
	var other *ctlNode
	for _, n := range h.ctls {
		if n != lead {
			other = n
		}
	}
	before := testutil.ToFloat64(other.store.met.leaderChanges)
	lead.kill()
	h.waitLeader()
	waitFor(t, "a leader change counted", func() bool { return testutil.ToFloat64(other.store.met.leaderChanges) > before })
	waitFor(t, "log entries counted", func() bool { return testutil.ToFloat64(other.store.met.logEntries) > 0 })
}

func testutilLeaderChanges(n *ctlNode) float64 { return testutil.ToFloat64(n.store.met.leaderChanges) }
