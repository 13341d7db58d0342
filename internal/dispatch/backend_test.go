package dispatch

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
)

// verbNodes is a verb a controller might add.
const verbNodes = "nodes"

// controllerBackend is what a controller's backend looks like: it serves
// its own verbs (here a place that picks the node, and nodes) and hands
// every other request to the Dispatcher.
type controllerBackend struct {
	d *Dispatcher
}

func (b controllerBackend) Verbs() []string { return append(b.d.Verbs(), verbNodes) }

func (b controllerBackend) Operate(ctx context.Context, req OperatorRequest) OperatorResponse {
	switch {
	case req.Verb == verbNodes:
		return OperatorResponse{OK: true, Class: ClassOK, Result: json.RawMessage(`["n-1","n-2"]`)}
	case req.Verb == VerbPlace && req.Node == "":
		return OperatorResponse{OK: true, Class: ClassOK, Node: "n-2", DecisionID: decidedID}
	}
	return b.d.Operate(ctx, req)
}

// The operator socket serves whatever backend it is given: a controller's
// verbs plug in beside the Dispatcher's, the wire format unchanged, and
// requests are counted under the backend's verbs.
func TestOperatorServesBackendVerbs(t *testing.T) {
	ident := meshtest.NewIdentity(t)
	d := newDispatcher(t, ident, nil, newLocalHost(t, ident, describeHandler))
	reg := prometheus.NewRegistry()
	path := filepath.Join(t.TempDir(), "nodeld.sock")
	o := runOperatorWith(t, OperatorDeps{Backend: controllerBackend{d: d}, Registerer: reg}, path)

	ctx := callCtx(t)
	tests := []struct {
		name string
		req  OperatorRequest
		want OperatorResponse
	}{
		{"controller verb", OperatorRequest{Verb: verbNodes},
			OperatorResponse{OK: true, Class: ClassOK, Result: json.RawMessage(`["n-1","n-2"]`)}},
		{"place without a node", OperatorRequest{Verb: VerbPlace, Args: OperatorArgs{PackageDir: "/p"}},
			OperatorResponse{OK: true, Class: ClassOK, Node: "n-2", DecisionID: decidedID}},
		{"dispatcher verb", OperatorRequest{Verb: VerbDescribe, Node: config.SelfRef},
			OperatorResponse{OK: true, Class: ClassOK, Node: ident.ID(), Result: json.RawMessage(`{"facts":null,"advertisement":{},"chain_head":"head"}`)}},
		{"unknown verb", OperatorRequest{Verb: "frob", Node: config.SelfRef},
			OperatorResponse{Class: ClassError, Code: CodeBadRequest, Reason: `unknown verb "frob"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DialOperator(ctx, path, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("response (-want +got):\n%s", diff)
			}
		})
	}
	if n, err := testutil.GatherAndCount(reg, "nodeld_dispatch_operator_requests_total"); err != nil || n != 4 {
		t.Errorf("registered series %d (%v), want 4: the verb of an unknown request is not a label", n, err)
	}
	for _, tt := range []struct {
		verb, class string
		want        float64
	}{
		{verbNodes, ClassOK, 1}, {VerbPlace, ClassOK, 1}, {VerbDescribe, ClassOK, 1}, {"unknown", ClassError, 1}, {"frob", ClassError, 0},
	} {
		if got := testutil.ToFloat64(o.requests.WithLabelValues(tt.verb, tt.class)); got != tt.want {
			t.Errorf("requests{verb=%q,class=%q} = %v, want %v", tt.verb, tt.class, got, tt.want)
		}
	}
}

func TestDispatcherVerbs(t *testing.T) {
	d := newDispatcher(t, meshtest.NewIdentity(t), nil, nil)
	want := []string{VerbDescribe, VerbPlace, VerbStart, VerbStop, VerbUnload, VerbStatus, VerbLogs, VerbRevoke, VerbUnrevoke}
	if diff := cmp.Diff(want, d.Verbs()); diff != "" {
		t.Fatalf("verbs (-want +got):\n%s", diff)
	}
	// Every verb it lists, it serves (none is answered as unknown).
	for _, v := range d.Verbs() {
		resp := d.Operate(callCtx(t), OperatorRequest{Verb: v, Node: "nobody"})
		if resp.Reason == `unknown verb "`+v+`"` {
			t.Errorf("verb %s is listed but not served", v)
		}
	}
	if slices.Contains(d.Verbs(), verbNodes) {
		t.Fatal("the Dispatcher serves a controller verb")
	}
}

func TestNewOperatorServerNeedsBackend(t *testing.T) {
	if _, err := NewOperatorServer(OperatorConfig{Path: filepath.Join(t.TempDir(), "s")}, OperatorDeps{}); err == nil {
		t.Fatal("no backend accepted")
	}
}
