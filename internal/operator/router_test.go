package operator

import (
	"slices"
	"testing"
)

// TestRouterWithoutController: on a node that runs no controller, the
// controller's verbs and the place arguments only a controller takes are
// refused no_controller; a place on a named node, and every other verb,
// goes to the dispatcher as it is.
func TestRouterWithoutController(t *testing.T) {
	if _, err := NewRouter(RouterDeps{}); err == nil {
		t.Fatal("a router without a dispatcher was built")
	}
	r, err := NewRouter(RouterDeps{Dispatcher: nodeBackend{}, NodeID: selfID})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{VerbExplain, VerbPlacements, VerbNodes, VerbWorkloads, VerbDescribe} {
		if !slices.Contains(r.Verbs(), v) {
			t.Errorf("Verbs() lacks %s: %v", v, r.Verbs())
		}
	}
	ctx := callCtx(t)
	for _, req := range []Request{
		{Verb: VerbExplain, Args: Args{DecisionID: "abcdef01"}},
		{Verb: VerbPlacements},
		{Verb: VerbNodes},
		{Verb: VerbWorkloads},
		{Verb: VerbPlace, Args: Args{PackageDir: "/p"}},
		{Verb: VerbPlace, Node: "a", Args: Args{PackageDir: "/p", DryRun: true}},
		{Verb: VerbPlace, Node: "a", Args: Args{Package: "echo"}},
		{Verb: VerbStart, Args: Args{Instance: "i-1"}},
	} {
		if resp := r.Operate(ctx, req); resp.Class != ClassError || resp.Code != CodeNoController {
			t.Errorf("%s %+v = %+v, want error no_controller", req.Verb, req.Args, resp)
		}
	}
	if resp := r.Operate(ctx, Request{Verb: VerbDescribe, Node: "self"}); !resp.OK || resp.Node != selfID {
		t.Errorf("describe through the router = %+v, want the dispatcher's answer", resp)
	}
	if resp := r.Operate(ctx, Request{Verb: VerbStop, Node: "self", Args: Args{Instance: "i-1"}}); resp.Class != ClassRefused {
		t.Errorf("stop through the router = %+v, want the dispatcher's refusal", resp)
	}
	if st := r.ControllerStatus(); st != nil {
		t.Errorf("ControllerStatus without a controller = %+v, want nil", st)
	}
}
