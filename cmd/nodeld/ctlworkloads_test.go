package main

import (
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
)

// TestCtlWorkloadsShowsUnplaceable: a declared workload whose package the
// store does not hold is listed by ctl workloads with its state and
// reason, counted in /v1/status, and named on the status's declared line.
func TestCtlWorkloadsShowsUnplaceable(t *testing.T) {
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
