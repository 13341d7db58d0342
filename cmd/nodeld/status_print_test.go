package main

import (
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
)

// A role resolved to a peer that restarted and has not linked again says
// so: a request to it waits for the link rather than being served at once.
func TestPrintStatusWaitingForLink(t *testing.T) {
	st := &operator.StatusDoc{Roles: []operator.RoleDoc{
		{Name: "chat", Listen: "127.0.0.1:8001", Resolved: "remote n-abc", WaitingForLink: true},
		{Name: "embed", Listen: "127.0.0.1:8002", Resolved: "remote n-def"},
	}}
	var sb strings.Builder
	printStatus(&sb, st)
	out := sb.String()
	if !strings.Contains(out, "-> remote n-abc (restarted or stopped, waiting for its link)") {
		t.Errorf("status does not show chat waiting for its link:\n%s", out)
	}
	if strings.Contains(out, "n-def (restarted") {
		t.Errorf("status shows a live route as waiting:\n%s", out)
	}
}
