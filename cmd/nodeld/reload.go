package main

import (
	"fmt"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/reload"
)

// reload re-reads the config and applies it all or nothing (applyReload),
// then reports the outcome: the reload gauge and counter, the status, a
// log line and, for a refusal, a chain entry (a reload that went through
// chained its own before it took effect).
func (n *node) reload() {
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReloading)
	defer func() { _, _ = daemon.SdNotify(false, daemon.SdNotifyReady) }()
	err := n.applyReload()
	if err != nil {
		n.reloadOK.Set(0)
		n.reloadSum.WithLabelValues("refused").Inc()
		n.mu.Lock()
		n.lastErr = err.Error()
		n.mu.Unlock()
		n.log.Error("config reload refused; keeping the old config", zap.Error(err))
		if _, cerr := n.chain.Append(chainSource, "config.reload", map[string]any{
			"ok": false, "config": configSource(n.cfgPath), "error": err.Error(),
		}); cerr != nil {
			n.log.Error("chain config.reload", zap.Error(cerr))
		}
		return
	}
	n.reloadOK.Set(1)
	n.reloadSum.WithLabelValues("ok").Inc()
	n.mu.Lock()
	n.lastErr = ""
	n.mu.Unlock()
	n.log.Info("config reloaded", zap.String("config", configSource(n.cfgPath)))
}

// applyReload applies the config file all or nothing:
//
//  1. read, decode and validate the whole file;
//  2. refuse a change to a key that takes effect only on restart
//     (config.RestartOnly, the one list);
//  3. run every component's static check (checkComponents, as config
//     check and run do);
//  4. prepare every component against the running node (reloadSteps, one
//     list, reload.All): these change nothing, except the proxy's, last,
//     which binds the new role ports so that a port in use fails here;
//  5. chain the reload; if that fails, abort;
//  6. commit every component, in the list's order; no commit can fail.
//
// On any error the old config stays fully in force (new ports closed,
// nothing else touched) and the error says why.
func (n *node) applyReload() error {
	next, err := n.load()
	if err != nil {
		return err
	}
	diff := config.Changed(n.config(), next)
	if err := diff.RestartError(); err != nil {
		return err
	}
	if err := checkComponents(next, configSource(n.cfgPath)); err != nil {
		return err
	}
	if err := checkNodeRefs(next, configSource(n.cfgPath), n.knownNodes()); err != nil {
		return err
	}
	p, err := reload.All(n.reloadSteps(next))
	if err != nil {
		return err
	}
	if _, err := n.chain.Append(chainSource, "config.reload", map[string]any{
		"ok": true, "config": configSource(n.cfgPath), "changed": diff.Fields,
	}); err != nil {
		p.Abort()
		return fmt.Errorf("chain config.reload: %w", err)
	}
	p.Commit()
	return nil
}

// reloadSteps are the node's reloadable components, each given its part of
// next by the mapping config check and run use (proxyConfig, meshConfig,
// ...), in the order they commit:
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
			level, err := logLevel(next)
			if err != nil {
				return nil, err
			}
			return reload.Commit(func() { n.level.SetLevel(level) }), nil
		}},
		{Name: "admin", Prepare: func() (reload.Prepared, error) { return n.admin.Prepare(adminConfig(next)) }},
		{Name: "adopter", Prepare: func() (reload.Prepared, error) { return n.adopter.Prepare(adopterConfig(next, n.discover)) }},
		{Name: "host", Prepare: func() (reload.Prepared, error) {
			hc, err := nodeHostConfig(next, n.id)
			if err != nil {
				return nil, err
			}
			return n.host.Prepare(hc)
		}},
	}
	if n.mesh != nil {
		steps = append(steps,
			reload.Step{Name: "mesh", Prepare: func() (reload.Prepared, error) { return n.mesh.Prepare(meshConfig(next)) }},
			reload.Step{Name: "forwarder", Prepare: func() (reload.Prepared, error) { return n.forwarder.Prepare(forwarderLimits(next)) }},
		)
	}
	if n.ctrl != nil {
		steps = append(steps, reload.Step{Name: "controller", Prepare: func() (reload.Prepared, error) { return n.ctrl.PrepareReload(next) }})
	}
	steps = append(steps,
		// The table's role names were checked with the config
		// (checkComponents); the allowlists resolve at commit.
		reload.Step{Name: "roles", Prepare: func() (reload.Prepared, error) { return reload.Commit(n.applyRolePolicy), nil }},
		reload.Step{Name: "proxy", Prepare: func() (reload.Prepared, error) { return prepared(n.proxy.Prepare(proxyConfig(next))) }},
	)
	return steps
}

// prepared is a component's Prepare result as a reload.Prepared: never a
// typed nil in the interface.
func prepared[P reload.Prepared](p P, err error) (reload.Prepared, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

// logLevel is log.level as the logger takes it.
func logLevel(cfg *config.Config) (zapcore.Level, error) {
	var level zapcore.Level
	if err := level.UnmarshalText([]byte(cfg.Log.Level)); err != nil {
		return level, fmt.Errorf("log.level: %w", err)
	}
	return level, nil
}

// reloadConfig reads the config a reload applies: the file at path, or
// the embedded default when path is "".
func reloadConfig(path string) (*config.Config, error) {
	var cfg *config.Config
	var err error
	if path == "" {
		cfg, err = config.LoadEmbedded()
	} else {
		cfg, err = config.Load(path)
	}
	if err != nil {
		return nil, err
	}
	if err := absolutePaths(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}
