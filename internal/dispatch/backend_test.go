package dispatch

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/operator"
)

// verbNodes is a verb a controller adds (operator.VerbNodes).
const verbNodes = "nodes"

func TestDispatcherVerbs(t *testing.T) {
	d := newDispatcher(t, meshtest.NewIdentity(t), nil, nil)
	want := []string{operator.VerbDescribe, operator.VerbPlace, operator.VerbStart, operator.VerbStop, operator.VerbUnload, operator.VerbStatus, operator.VerbLogs, operator.VerbRevoke, operator.VerbUnrevoke}
	if diff := cmp.Diff(want, d.Verbs()); diff != "" {
		t.Fatalf("verbs (-want +got):\n%s", diff)
	}
	// Every verb it lists, it serves (none is answered as unknown).
	for _, v := range d.Verbs() {
		resp := d.Operate(callCtx(t), operator.Request{Verb: v, Node: "nobody"})
		if resp.Reason == `unknown verb "`+v+`"` {
			t.Errorf("verb %s is listed but not served", v)
		}
	}
	if slices.Contains(d.Verbs(), verbNodes) {
		t.Fatal("the Dispatcher serves a controller verb")
	}
}
