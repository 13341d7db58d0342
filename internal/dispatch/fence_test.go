package dispatch

import (
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/pkg"
)

// newRealHost serves n's ctl streams with a real workload host whose
// controllers are controllers. It trusts no publisher: a place reaches
// its package checks and is refused there.
func newRealHost(t *testing.T, n *meshNode, controllers ...ed25519.PublicKey) *host.Host {
	t.Helper()
	rev, err := pkg.OpenRevocations(filepath.Join(n.Dir, pkg.RevocationsFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	ch := openChain(t, n.Ident)
	rec, err := chain.NewRecorder(ch, chain.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{Enabled: true, Controllers: controllers, DataDir: n.Dir},
		host.Deps{Identity: n.Ident, Mesh: n.Mesh, Audit: ch, Recorder: rec, Revocations: rev,
			Logger: zaptest.NewLogger(t).Named("host"), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	h.Register()
	return h
}

// Every call a controller's dispatcher makes carries its term, read at
// the call: a real host fences a deposed controller (a lower term) on
// every one of them, with an error the controller tells apart
// (ctl.ErrStaleTerm), and lets the leader's through.
func TestForControllerCarriesTermAndIsFenced(t *testing.T) {
	leaderNode, deposedNode, hostNode := startMesh(t, "leader"), startMesh(t, "deposed"), startMesh(t, "b")
	h := newRealHost(t, hostNode, leaderNode.Ident.PublicKey(), deposedNode.Ident.PublicKey())
	leaderNode.Apply(hostNode.Peer())
	deposedNode.Apply(hostNode.Peer())
	meshtest.AdmitLater(t, hostNode, leaderNode, deposedNode)

	var leaderTerm atomic.Uint64
	leaderTerm.Store(5)
	leaderD := newDispatcher(t, leaderNode.Ident, leaderNode.Mesh, nil)
	leader := NewForController(leaderD, ForControllerDeps{Term: leaderTerm.Load})
	deposedD := newDispatcher(t, deposedNode.Ident, deposedNode.Mesh, nil)
	deposed := NewForController(deposedD, ForControllerDeps{Term: func() uint64 { return 4 }})
	ctx := callCtx(t)

	// The leader's first contact, a read, gives the host its term.
	if _, err := leader.Status(ctx, "b"); err != nil {
		t.Fatalf("leader status: %v", err)
	}
	if _, term := h.ControllerTerm(); term != 5 {
		t.Fatalf("host term %d, want 5", term)
	}

	vp := verifyOwn(t, leaderD, makePackage(t, map[string][]byte{"bin/echo": []byte("#!/bin/sh\n")}), nil)
	calls := []struct {
		name string
		call func(p *ForController) error
	}{
		{"describe", func(p *ForController) error { _, err := p.Describe(ctx, "b"); return err }},
		{"status", func(p *ForController) error { _, err := p.Status(ctx, "b"); return err }},
		{"place", func(p *ForController) error {
			_, err := p.PlaceDecided(ctx, "b", vp, "default", ctl.InstanceConfig{}, true, decidedID)
			return err
		}},
		{"start", func(p *ForController) error { return p.Start(ctx, "b", "missing") }},
		{"stop", func(p *ForController) error { return p.Stop(ctx, "b", "missing") }},
		{"unload", func(p *ForController) error { return p.Unload(ctx, "b", "missing") }},
	}
	for _, c := range calls {
		err := c.call(deposed)
		ce, ok := errors.AsType[*ctl.CallError](err)
		if !errors.Is(err, ctl.ErrStaleTerm) || !ok || ce.Class != ctl.ClassRefused {
			t.Errorf("deposed %s: %v, want a refusal matching ctl.ErrStaleTerm", c.name, err)
		}
		// The leader's call passes the fence (a mutation without its term
		// would not): it is answered, or refused for what it asks.
		if err := c.call(leader); errors.Is(err, ctl.ErrStaleTerm) {
			t.Errorf("leader %s: %v", c.name, err)
		}
	}
	if got := testutil.ToFloat64(deposedD.met.staleTerms); got != float64(len(calls)) {
		t.Errorf("deposed stale_term refusals counted %v, want %d", got, len(calls))
	}

	// The term is read at each call: a new term reaches the host at the
	// next one, and the old one is then fenced too.
	leaderTerm.Store(9)
	if _, err := leader.Status(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, term := h.ControllerTerm(); term != 9 {
		t.Fatalf("host term %d, want 9", term)
	}
	// A dispatcher without a term (nil Term) may still read, and no
	// longer mutate.
	noTerm := NewForController(leaderD, ForControllerDeps{})
	if _, err := noTerm.Status(ctx, "b"); err != nil {
		t.Errorf("term-less status: %v", err)
	}
	if err := noTerm.Stop(ctx, "b", "missing"); !errors.Is(err, ctl.ErrStaleTerm) {
		t.Errorf("term-less stop: %v, want stale_term", err)
	}
}

// A mutation's decision and outcome, chained by the dispatcher, name the
// term the call carried.
func TestForControllerChainsTerm(t *testing.T) {
	c := newCluster(t)
	var got atomic.Uint64
	c.far.set(func(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
		got.Store(req.Term)
		return ctl.StopResult{Stopped: "i-1"}, nil
	})
	p := NewForController(c.d, ForControllerDeps{Term: func() uint64 { return 12 }})
	if err := p.Stop(callCtx(t), "b", "i-1"); err != nil {
		t.Fatal(err)
	}
	if got.Load() != 12 {
		t.Fatalf("the host saw term %d, want 12", got.Load())
	}
	var terms []any
	for _, e := range chainEntries(t, c.d) {
		if e["kind"] == KindDecision || e["kind"] == KindOutcome {
			terms = append(terms, e["payload"].(map[string]any)["term"])
		}
	}
	if len(terms) != 2 || terms[0] != 12.0 || terms[1] != 12.0 {
		t.Fatalf("terms chained %v, want 12 in the decision and the outcome", terms)
	}
}
