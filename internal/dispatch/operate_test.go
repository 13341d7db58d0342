package dispatch

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/operator"
)

// localHost is a test workload host served in-process for "self".
type localHost struct {
	server *ctl.Server
	pub    ed25519.PublicKey
}

func newLocalHost(t testing.TB, ident *identity.Identity, h ctl.Handler) *localHost {
	t.Helper()
	v, err := ctl.NewVerifier(ctl.VerifierConfig{Self: ident.PublicKey(), Controllers: []ed25519.PublicKey{ident.PublicKey()}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := ctl.NewServer(ctl.ServerConfig{Verifier: v, Key: ident.PrivateKey(), Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	return &localHost{server: s, pub: ident.PublicKey()}
}

func (l *localHost) ServeLocal(ctx context.Context, s ctl.Stream) {
	_, _ = l.server.Serve(ctx, s, l.pub)
}

func describeHandler(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
	switch req.Method {
	case ctl.MethodDescribe:
		return ctl.DescribeResult{Facts: json.RawMessage(`null`), Advertisement: json.RawMessage(`{}`), ChainHead: "head"}, nil
	case ctl.MethodStop:
		return nil, ctl.NewRefusal(ctl.CodeUnknownInstance, "no "+string(req.Method))
	}
	return nil, ctl.NewRefusal(ctl.CodeRuntime, "unexpected")
}

// TestDispatcherOperate: the dispatcher's verbs as the operator socket
// serves them (operator.Backend): an answer, a refusal, bad requests and
// an unknown node, each classified.
func TestDispatcherOperate(t *testing.T) {
	ident := meshtest.NewIdentity(t)
	d := newDispatcher(t, ident, nil, newLocalHost(t, ident, describeHandler))
	ctx := callCtx(t)
	tests := []struct {
		name string
		req  operator.Request
		want operator.Response
	}{
		{"describe self", operator.Request{Verb: operator.VerbDescribe, Node: config.SelfRef},
			operator.Response{OK: true, Class: operator.ClassOK, Node: ident.ID(), Result: json.RawMessage(`{"facts":null,"advertisement":{},"chain_head":"head"}`)}},
		{"refused stop", operator.Request{Verb: operator.VerbStop, Node: config.SelfRef, Args: operator.Args{Instance: "i-1", GraceMS: 100}},
			operator.Response{Class: operator.ClassRefused, Code: "unknown_instance", Reason: "no workload.stop"}},
		{"unknown verb", operator.Request{Verb: "frob", Node: config.SelfRef},
			operator.Response{Class: operator.ClassError, Code: operator.CodeBadRequest, Reason: `unknown verb "frob"`}},
		{"missing instance", operator.Request{Verb: operator.VerbStart, Node: config.SelfRef},
			operator.Response{Class: operator.ClassError, Code: operator.CodeBadRequest, Reason: "start needs an instance"}},
		{"unknown node", operator.Request{Verb: operator.VerbStatus, Node: "nobody"},
			operator.Response{Class: operator.ClassUnreachable, Reason: `"nobody": no admitted peer by that name or id (no mesh)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Through JSON, as the socket carries it.
			b, err := json.Marshal(d.Operate(ctx, tt.req))
			if err != nil {
				t.Fatal(err)
			}
			var got operator.Response
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("response (-want +got):\n%s", diff)
			}
		})
	}
}
