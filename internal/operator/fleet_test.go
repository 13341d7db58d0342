package operator

import (
	"context"
	"errors"
	"testing"
)

// recordingBackend records the requests the router hands the dispatcher.
type recordingBackend struct {
	nodeBackend
	got *[]Request
}

func (b recordingBackend) Operate(ctx context.Context, req Request) Response {
	*b.got = append(*b.got, req)
	return b.nodeBackend.Operate(ctx, req)
}

// TestFleetWithoutController: a node without a controller has no fleet
// and explains no decision; its instance logs go to the dispatcher's logs
// verb for this node, as nodeld ctl logs does, and an id that is not one
// never leaves the router.
func TestFleetWithoutController(t *testing.T) {
	var got []Request
	r, err := NewRouter(RouterDeps{Dispatcher: recordingBackend{got: &got}, NodeID: selfID})
	if err != nil {
		t.Fatal(err)
	}
	if f := r.Fleet(); f != nil {
		t.Errorf("Fleet without a controller = %+v, want nil", f)
	}
	if _, err := r.DecisionDetail("abcdef01"); !errors.Is(err, ErrNotExplained) {
		t.Errorf("DecisionDetail without a controller: %v, want ErrNotExplained", err)
	}
	ctx := callCtx(t)
	for _, bad := range []string{"", "../etc/passwd", "i d"} {
		if _, err := r.InstanceLogs(ctx, bad); !errors.Is(err, ErrNoInstance) {
			t.Errorf("InstanceLogs(%q): %v, want ErrNoInstance", bad, err)
		}
	}
	if len(got) != 0 {
		t.Fatalf("invalid ids reached the dispatcher: %+v", got)
	}
	// The test backend knows no logs verb: an error, not ErrNoInstance.
	if _, err := r.InstanceLogs(ctx, "i-1"); err == nil || errors.Is(err, ErrNoInstance) {
		t.Errorf("InstanceLogs through a backend without logs: %v", err)
	}
	if len(got) != 1 || got[0].Verb != VerbLogs || got[0].Node != "self" || got[0].Args.Instance != "i-1" {
		t.Errorf("the dispatcher got %+v, want logs of i-1 on self", got)
	}
}
