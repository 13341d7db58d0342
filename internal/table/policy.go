package table

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nodeld/nodeld/internal/grammar"
)

// RolePolicy is the configured mesh policy of one role.
type RolePolicy struct {
	// Expose lets this node's instance of the role serve mesh peers.
	Expose bool
	// ServeTo lists the peers (node ids) this node serves the role to.
	ServeTo []string
	// UseFrom lists the nodes (node ids) this node lets serve the role for
	// it.
	UseFrom []string
}

// ApplyPolicy makes every role's exposure and both allowlists exactly p:
// roles absent from p end up neither exposed nor allowed anywhere. It is
// applied atomically (no reader sees half a policy) and each individual
// change is audited exactly as ExposeToMesh, AllowMeshPeer and
// AllowRemoteNode would audit it, in a deterministic order: roles sorted,
// and within a role exposure, then serve_to, then use_from, nodes sorted.
// An unchanged policy records nothing and bumps nothing.
func (t *Table) ApplyPolicy(p map[string]RolePolicy) {
	var e effects
	t.mu.Lock()
	roles := make(map[string]struct{}, len(p))
	for r := range p {
		roles[r] = struct{}{}
	}
	for r := range t.exposed {
		roles[r] = struct{}{}
	}
	for r := range t.allow {
		roles[r] = struct{}{}
	}
	for r := range t.serveAllow {
		roles[r] = struct{}{}
	}
	for _, role := range slices.Sorted(maps.Keys(roles)) {
		want := p[role]
		t.setExposed(&e, role, want.Expose)
		for _, d := range diffSet(t.serveAllow[role], want.ServeTo) {
			t.setAllowMeshPeer(&e, role, d.node, d.on)
		}
		for _, d := range diffSet(t.allow[role], want.UseFrom) {
			t.setAllowRemote(&e, role, d.node, d.on)
		}
	}
	t.mu.Unlock()
	t.finish(e)
}

// CheckPolicy reports every problem of a policy ApplyPolicy would take
// without complaint but that could never resolve: a role that is not
// a grammar.ValidName (RegisterLocal refuses it) and an empty node id. Roles are
// reported in sorted order.
func CheckPolicy(p map[string]RolePolicy) error {
	var errs []error
	for _, role := range slices.Sorted(maps.Keys(p)) {
		if !grammar.ValidName(role) {
			errs = append(errs, fmt.Errorf("role %q: %w: %s", role, ErrBadRole, grammar.NameSyntax))
		}
		rp := p[role]
		if slices.Contains(rp.ServeTo, "") || slices.Contains(rp.UseFrom, "") {
			errs = append(errs, fmt.Errorf("role %q: empty node id in an allowlist", role))
		}
	}
	return errors.Join(errs...)
}

type setChange struct {
	node string
	on   bool
}

// diffSet returns the changes that turn have into want, sorted by node.
func diffSet(have map[string]struct{}, want []string) []setChange {
	wantSet := make(map[string]struct{}, len(want))
	for _, n := range want {
		wantSet[n] = struct{}{}
	}
	var out []setChange
	for n := range have {
		if _, ok := wantSet[n]; !ok {
			out = append(out, setChange{n, false})
		}
	}
	for n := range wantSet {
		if _, ok := have[n]; !ok {
			out = append(out, setChange{n, true})
		}
	}
	slices.SortFunc(out, func(a, b setChange) int {
		switch {
		case a.node < b.node:
			return -1
		case a.node > b.node:
			return 1
		}
		return 0
	})
	return out
}
