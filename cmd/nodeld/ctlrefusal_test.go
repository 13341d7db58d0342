package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
)

// TestRefusedByNamesOnlyARefusingNode: a place pinned to b that
// governance refused before any call does not say "refused by b"; one
// that b refused does; a node's own refusal (no controller) names it.
func TestRefusedByNamesOnlyARefusingNode(t *testing.T) {
	req := operator.Request{Verb: operator.VerbPlace, Node: "b"}
	errText := func(res operator.PlaceResult, code, reason string) string {
		raw, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		resp := operator.Response{Class: operator.ClassRefused, Code: code, Reason: reason, Result: raw}
		var sb strings.Builder
		return printCtl(&sb, req, resp, true).Error()
	}
	got := errText(operator.PlaceResult{DecisionID: "ab", Outcome: "governance", Explain: "x\n", Attempts: []operator.AttemptDoc{}},
		"governance", "denied by the policy: n-b: node is in policy.deny_nodes")
	if want := "place refused: governance: denied by the policy"; !strings.HasPrefix(got, want) {
		t.Errorf("governance refusal = %q, want it to start %q", got, want)
	}
	got = errText(operator.PlaceResult{DecisionID: "ab", Outcome: "failed", Explain: "x\n",
		Attempts: []operator.AttemptDoc{{Node: "n-b", Outcome: "refused", Code: "verify"}}}, "verify", "bad")
	if want := "place refused by n-b: verify: bad"; got != want {
		t.Errorf("refused by the node = %q, want %q", got, want)
	}
	var sb strings.Builder
	got = printCtl(&sb, operator.Request{Verb: operator.VerbStop, Node: "b"},
		operator.Response{Class: operator.ClassRefused, Code: "verify", Reason: "no"}, false).Error()
	if want := "stop refused by b: verify: no"; got != want {
		t.Errorf("a node's refusal = %q, want %q", got, want)
	}
}

// TestPlacementsLostHostStateIsUnknown: a lost instance's HOST STATE is
// not the stale "running" its node last reported.
func TestPlacementsLostHostStateIsUnknown(t *testing.T) {
	var sb strings.Builder
	printPlacements(&sb, []operator.PlacementDoc{
		{DecisionID: strings.Repeat("a", 64), Workload: "chat", Node: "n-b", Life: "lost", HostState: "running", LostReason: "node silent"},
		{DecisionID: strings.Repeat("b", 64), Workload: "embed", Node: "n-c", Life: "placed", HostState: "running"},
	})
	lines := strings.Split(sb.String(), "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], "unknown (last running)") || strings.Contains(lines[2], "unknown") {
		t.Fatalf("placements:\n%s", sb.String())
	}
}
