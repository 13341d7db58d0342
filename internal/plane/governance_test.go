package plane

import (
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/pkg"
)

// TestGovernanceDenialIsNotUnplaceable: a kind the policy does not admit
// is refused by governance with the policy's reason and no made-up trust
// rejection; a place pinned to a node in deny_nodes is governance's
// refusal too, and no node is called; a declared workload of a denied
// kind says governance.
func TestGovernanceDenialIsNotUnplaceable(t *testing.T) {
	r, hs := newRig(t, 8, 8)
	r.cl.AddPackage("/pkg/infer", "infer", pkg.KindInference, 1)
	r.tick()

	rep := r.place(Order{PackageDir: "/pkg/infer", Start: true})
	if rep.Decision.Chosen != nil || !strings.Contains(rep.Governance, `kind "inference" is not admitted by the policy`) {
		t.Fatalf("governance %q, chosen %+v", rep.Governance, rep.Decision.Chosen)
	}
	explain := rep.Explain()
	if strings.Contains(explain, "trust:") || !strings.Contains(explain, "governance: kind") {
		t.Errorf("explanation of a denied kind:\n%s", explain)
	}

	r.cfg.Policy.DenyNodes = []string{hs[1].ID}
	if err := r.c.ApplyConfig(r.cfg); err != nil {
		t.Fatal(err)
	}
	calls := r.placeCalls()
	rep = r.place(Order{PackageDir: "/pkg/echo", Start: true, Pin: hs[1].ID})
	if want := hs[1].ID + ": node is in policy.deny_nodes"; !strings.Contains(rep.Governance, want) {
		t.Fatalf("pinned to a denied node: governance %q, want %q", rep.Governance, want)
	}
	if len(rep.Attempts) != 0 || r.placeCalls() != calls {
		t.Errorf("a node was called: %+v", rep.Attempts)
	}
	// Unpinned, the other node takes it: not governance's.
	if rep = r.place(echo); rep.Governance != "" || rep.Placed == nil || rep.Placed.Node != hs[0].ID {
		t.Errorf("unpinned: governance %q placed %+v", rep.Governance, rep.Placed)
	}

	r.addVersion("infer", "1.0.0", 1, func(m *pkg.Manifest) { m.Kind = pkg.KindInference })
	r.declare(false, Workload{Name: "denied", Package: "infer"})
	r.step()
	ds := r.c.Declarations()
	if len(ds) != 1 || ds[0].State != DeclUnplaceable || !strings.HasPrefix(ds[0].Reason, "governance: kind") || strings.Contains(ds[0].Reason, "trust") {
		t.Fatalf("declared workload of a denied kind: %+v", ds)
	}
}
