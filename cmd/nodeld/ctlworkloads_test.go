package main

import (
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

// TestCtlWorkloadsShowsUnplaceable: a declared workload whose package the
// store does not hold is listed by ctl workloads with its state and
// reason, counted in /v1/status, and named on the status's declared line.
func TestCtlWorkloadsShowsUnplaceable(t *testing.T) {
	t.Parallel()
	anchor := strings.Repeat("ab", 32)
	cfg := nodeConfig("%s", controllerSection(anchor, "200ms", "5s", "2s")+
		"  workloads:\n    - name: ghost\n      package: nope\n")
	n := startNode(t, cfg, nil)
	sock := n.n.config().SocketPath()
	var ws []operator.WorkloadDoc
	waitLong(t, "ghost to be unplaceable", func() bool {
		ctlJSON(t, sock, &ws, "workloads")
		return len(ws) == 1 && ws[0].State == "unplaceable"
	})
	if w := ws[0]; w.Name != "ghost" || !strings.Contains(w.Reason, "nope") || w.Since == "" || w.Replicas != 1 || w.Placed != 0 {
		t.Errorf("ctl workloads: %+v", w)
	}
	out, errOut, rc := runCtl(t, "--socket", sock, "workloads")
	if rc != 0 || !strings.Contains(out, "NAME") || !strings.Contains(out, "ghost") || !strings.Contains(out, "unplaceable") {
		t.Fatalf("ctl workloads = %d %q %q", rc, out, errOut)
	}
	st := n.n.status().(*operator.StatusDoc)
	c := st.Controller
	if c == nil || c.DeclarationsByState["unplaceable"] != 1 || len(c.Unplaceable) != 1 || c.Unplaceable[0] != "ghost" {
		t.Fatalf("status controller: %+v", c)
	}
	var sb strings.Builder
	printStatus(&sb, st)
	if !strings.Contains(sb.String(), "declared 1 unplaceable (unplaceable: ghost;") {
		t.Errorf("nodeld status lacks the declared line:\n%s", sb.String())
	}
}

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
	if got := p.HostStateText(); got != "running (on-demand idle)" {
		t.Fatalf("host state %q", got)
	}
	p.OnDemand = ""
	if got := p.HostStateText(); got != "running" {
		t.Fatalf("host state %q", got)
	}
}
