package dispatch

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/pkg"
)

func TestOperatorRevoke(t *testing.T) {
	ident := meshtest.NewIdentity(t)
	rev, err := pkg.OpenRevocations(filepath.Join(t.TempDir(), pkg.RevocationsFile), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	ch := openChain(t, ident)
	d, err := New(Deps{Identity: ident, Chain: ch, Revocations: rev, Logger: zaptest.NewLogger(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := callCtx(t)
	subject := &pkg.Subject{Kind: pkg.SubjectPackage, Value: "echo-llm", Reason: "bad build"}

	resp := d.Operate(ctx, operator.Request{Verb: operator.VerbRevoke, Node: config.SelfRef, Args: operator.Args{Subject: subject}})
	var res RevokeResult
	if !resp.OK || json.Unmarshal(resp.Result, &res) != nil || !res.Changed {
		t.Fatalf("revoke = %+v", resp)
	}
	if s, ok := rev.IsRevoked(pkg.SubjectPackage, "echo-llm"); !ok || s.Reason != "bad build" || s.By != "operator" {
		t.Fatalf("revocation list = %+v, %v", s, ok)
	}
	if resp := d.Operate(ctx, operator.Request{Verb: operator.VerbRevoke, Node: config.SelfRef, Args: operator.Args{Subject: subject}}); !resp.OK ||
		json.Unmarshal(resp.Result, &res) != nil || res.Changed {
		t.Fatalf("second revoke = %+v, want ok and unchanged", resp)
	}
	if resp := d.Operate(ctx, operator.Request{Verb: operator.VerbUnrevoke, Node: config.SelfRef, Args: operator.Args{Subject: subject}}); !resp.OK {
		t.Fatalf("unrevoke = %+v", resp)
	}
	if _, ok := rev.IsRevoked(pkg.SubjectPackage, "echo-llm"); ok {
		t.Fatal("still revoked after unrevoke")
	}
	// Chained before it was made.
	seq, _ := ch.Head()
	if seq < 4 { // genesis, revoke, revoke, unrevoke
		t.Fatalf("chain head seq %d, want the three operator edits chained", seq)
	}
	for _, tt := range []struct {
		name string
		req  operator.Request
	}{
		{"another node", operator.Request{Verb: operator.VerbRevoke, Node: "n-0123456789abcdef", Args: operator.Args{Subject: subject}}},
		{"no subject", operator.Request{Verb: operator.VerbRevoke, Node: config.SelfRef}},
		{"bad kind", operator.Request{Verb: operator.VerbRevoke, Node: config.SelfRef, Args: operator.Args{Subject: &pkg.Subject{Kind: "planet", Value: "x"}}}},
	} {
		if resp := d.Operate(ctx, tt.req); resp.OK || resp.Code != operator.CodeBadRequest {
			t.Errorf("%s: %+v, want a bad request", tt.name, resp)
		}
	}
	// A dispatcher without a list refuses.
	d2, _ := New(Deps{Identity: ident, Chain: ch})
	if resp := d2.Operate(ctx, operator.Request{Verb: operator.VerbRevoke, Node: config.SelfRef, Args: operator.Args{Subject: subject}}); resp.OK {
		t.Fatalf("revoke without a list = %+v", resp)
	}
}
