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
