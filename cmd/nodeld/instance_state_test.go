package main

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/operator"
)

// A failed instance says why and since when, in `nodeld status` and in
// `nodeld ctl status`.
func TestInstanceStateShowsReasonAndSince(t *testing.T) {
	since := time.Date(2026, 12, 5, 15, 4, 5, 0, time.UTC)
	st := &operator.StatusDoc{Host: &host.HostStatus{Enabled: true, Instances: []host.InstanceInfo{{
		ID: "chat-1234abcd-n-a", Package: "chat", Version: "1.0.0", Role: "chat", Runtime: "ollama",
		State: ctl.StateFailed, Since: since, Reason: ctl.ReasonRestartBudget, Restarts: 5,
	}}}}
	var sb strings.Builder
	printStatus(&sb, st)
	if want := "role chat failed (restart_budget) since 2026-12-05T15:04:05Z restarts 5"; !strings.Contains(sb.String(), want) {
		t.Errorf("status does not show %q:\n%s", want, sb.String())
	}
	got := stateText(ctl.InstanceState{State: ctl.StateFailed, Since: since, Reason: ctl.ReasonStartFailed,
		Detail: "start failed: HTTP 404: model 'x' not found"})
	if want := "failed (start_failed) since 2026-12-05T15:04:05Z: start failed: HTTP 404: model 'x' not found"; got != want {
		t.Errorf("stateText = %q, want %q", got, want)
	}
	if got := stateText(ctl.InstanceState{State: ctl.StateLoaded}); got != "loaded" {
		t.Errorf("stateText of a bare state = %q", got)
	}
}
