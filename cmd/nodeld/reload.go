package main

import (
	"github.com/nodeld/nodeld/internal/admin"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/lifecycle"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/meshproxy"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/reload"
	"github.com/nodeld/nodeld/internal/runner"
)

// reloadSteps are the node's reloadable components, each given its part of
// next by its own FromConfig (as config check and run), in the order they
// commit (lifecycle.Reloader applies them all or nothing):
//
//   - the config in force first, so that the mesh's peer change (which
//     resolves the role allowlists and the controller's targets again) and
//     the status read the new one;
//   - the log level, admin, adopter, host, mesh and its forwarder's limits;
//   - the controller once the mesh has the new peers (its loop applies
//     them, plane.Controller.Run);
//   - the role policies, with the allowlists resolved by the new mesh;
//   - the proxy last: its preparation holds something (the new role ports
//     and its reload lock), so it comes once all the others said yes, and
//     a new role's port serves once its policy is in force.
func (n *node) reloadSteps(next *config.Config) []reload.Step {
	steps := []reload.Step{
		{Name: "config", Prepare: func() (reload.Prepared, error) {
			return reload.Commit(func() {
				n.mu.Lock()
				n.cfg = next
				n.mu.Unlock()
			}), nil
		}},
		{Name: "log", Prepare: func() (reload.Prepared, error) {
			level, err := lifecycle.ParseLevel(next.Log.Level)
			if err != nil {
				return nil, err
			}
			return reload.Commit(func() { n.level.SetLevel(level) }), nil
		}},
		{Name: "admin", Prepare: func() (reload.Prepared, error) { return n.admin.Prepare(admin.FromConfig(next)) }},
		{Name: "adopter", Prepare: func() (reload.Prepared, error) { return n.adopter.Prepare(runner.AdopterFromConfig(next, n.discover)) }},
		{Name: "host", Prepare: func() (reload.Prepared, error) {
			hc, err := host.FromConfig(next, n.id.PublicKey())
			if err != nil {
				return nil, err
			}
			return n.host.Prepare(hc)
		}},
	}
	if n.mesh != nil {
		steps = append(steps,
			reload.Step{Name: "mesh", Prepare: func() (reload.Prepared, error) { return n.mesh.Prepare(mesh.FromConfig(next)) }},
			reload.Step{Name: "forwarder", Prepare: func() (reload.Prepared, error) { return n.forwarder.Prepare(meshproxy.LimitsFromConfig(next)) }},
		)
	}
	if n.ctrl != nil {
		steps = append(steps, reload.Step{Name: "controller", Prepare: func() (reload.Prepared, error) { return n.ctrl.PrepareReload(next) }})
	}
	return append(steps,
		// The role names were checked with the config (checkComponents); the allowlists resolve at commit.
		reload.Step{Name: "roles", Prepare: func() (reload.Prepared, error) { return reload.Commit(n.applyRolePolicy), nil }},
		reload.Step{Name: "proxy", Prepare: func() (reload.Prepared, error) { return prepared(n.proxy.Prepare(proxy.FromConfig(next))) }},
	)
}

// prepared is a component's Prepare result as a reload.Prepared: never a
// typed nil in the interface.
func prepared[P reload.Prepared](p P, err error) (reload.Prepared, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}
