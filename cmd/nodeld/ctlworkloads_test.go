package main

import (
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

// An on-demand workload shows its state in ctl workloads and on the
// status's declared line; an unplaceable one keeps its state.
func TestWorkloadsShowOnDemandState(t *testing.T) {
	docs := operator.WorkloadDocs([]plane.DeclarationView{
		{Name: "chat", Package: "llm", Replicas: 1, Placed: 1, State: plane.DeclPlaced, OnDemand: plane.OnDemandIdle},
		{Name: "code", Package: "coder", Replicas: 1, State: plane.DeclUnplaceable, Reason: "no eligible node", OnDemand: plane.OnDemandStarting},
		{Name: "web", Package: "svc", Replicas: 2, Placed: 2, State: plane.DeclPlaced},
	})
	var b strings.Builder
	printWorkloads(&b, docs)
	out := b.String()
	for _, want := range []string{"chat  ", "on-demand idle", "unplaceable", "web"} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl workloads lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "on-demand starting") {
		t.Errorf("an unplaceable on-demand workload shows its on-demand state instead:\n%s", out)
	}
	line := declaredText(&operator.ControllerDoc{DeclarationsByState: map[string]int{plane.DeclPlaced: 2},
		OnDemand: map[string]string{"code": plane.OnDemandStarting, "chat": plane.OnDemandIdle}})
	if !strings.HasSuffix(line, "; on demand: chat idle, code starting") {
		t.Errorf("declared line %q", line)
	}
}

// ctl placements shows an on-demand instance's state beside its host's.
func TestPlacementsShowOnDemandState(t *testing.T) {
	p := operator.PlacementDoc{Life: plane.LifePlaced, HostState: "running", OnDemand: plane.OnDemandIdle}
	if got := hostStateText(p); got != "running (on-demand idle)" {
		t.Fatalf("host state %q", got)
	}
	p.OnDemand = ""
	if got := hostStateText(p); got != "running" {
		t.Fatalf("host state %q", got)
	}
}
