package main

import (
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
)

// A capped placement is a line of nodeld status, with the ctl start that
// places it again.
func TestPrintStatusCapped(t *testing.T) {
	dec := strings.Repeat("ab", 32)
	st := &operator.StatusDoc{Controller: &operator.ControllerDoc{
		TargetsByLiveness: map[string]int{}, PlacementsByLife: map[string]int{"lost": 1},
		Capped: []operator.CappedDoc{{DecisionID: dec, Workload: "chat", Node: "n-abc", Moves: 5}},
	}}
	var sb strings.Builder
	printStatus(&sb, st)
	want := "capped   chat decision " + dec[:16] + "... lost on n-abc, moved 5 times in reschedule_window: nodeld ctl start " + dec[:16] + " places it again"
	if !strings.Contains(sb.String(), want) {
		t.Errorf("status does not show the capped placement:\n%s\nwant line %q", sb.String(), want)
	}
}

// A replicated controller's role, term and leader are a line of nodeld
// status; a single controller has none.
func TestPrintStatusRaft(t *testing.T) {
	for _, tc := range []struct {
		raft *operator.RaftDoc
		want string
	}{
		{&operator.RaftDoc{Role: "follower", Term: 7, Leader: "n-0123456789abcdef", LeaderName: "b"}, "raft     follower, term 7, leader b (n-0123456789abcdef)\n"},
		{&operator.RaftDoc{Role: "leader", Term: 8, Leader: "n-1", LeaderName: "self"}, "raft     leader, term 8, leader this node\n"},
		{&operator.RaftDoc{Role: "candidate", Term: 9}, "raft     candidate, term 9, leader none known"},
		{nil, ""},
	} {
		st := &operator.StatusDoc{Controller: &operator.ControllerDoc{TargetsByLiveness: map[string]int{}, PlacementsByLife: map[string]int{}, Raft: tc.raft}}
		var sb strings.Builder
		printStatus(&sb, st)
		if tc.want == "" && strings.Contains(sb.String(), "raft ") || !strings.Contains(sb.String(), tc.want) {
			t.Errorf("status with %+v:\n%s\nwant %q", tc.raft, sb.String(), tc.want)
		}
	}
}
