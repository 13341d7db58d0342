package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/proxy"
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
//  2. refuse what changes only with a restart;
//  3. run every component's static check (checkComponents, as config
//     check and run do);
//  4. prepare every component against the running node (prepareReload):
//     these change nothing, except the proxy's, last, which binds the new
//     role ports so that a port in use fails here;
//  5. chain the reload; if that fails, abort;
//  6. commit every component; no commit can fail.
//
// On any error the old config stays fully in force (new ports closed,
// nothing else touched) and the error says why.
func (n *node) applyReload() error {
	next, err := n.load()
	if err != nil {
		return err
	}
	old := n.config()
	diff := config.Changed(old, next)
	if diff.NeedsRestart() {
		return fmt.Errorf("%s change only with a restart", strings.Join(diff.Restart, ", "))
	}
	if next.Log.Format != old.Log.Format {
		return errors.New("log.format changes only with a restart")
	}
	var level zapcore.Level
	if err := level.UnmarshalText([]byte(next.Log.Level)); err != nil {
		return fmt.Errorf("log.level: %w", err)
	}
	if err := checkComponents(next, configSource(n.cfgPath)); err != nil {
		return err
	}
	if err := checkNodeRefs(next, configSource(n.cfgPath), n.knownNodes()); err != nil {
		return err
	}
	p, err := n.prepareReload(next)
	if err != nil {
		return err
	}
	if _, err := n.chain.Append(chainSource, "config.reload", map[string]any{
		"ok": true, "config": configSource(n.cfgPath), "changed": diff.Fields,
	}); err != nil {
		p.abort()
		return fmt.Errorf("chain config.reload: %w", err)
	}
	p.commit(n, next, level)
	return nil
}

// preparedReload is a reload every component has accepted: commit puts it
// in force, abort drops it. Exactly one of them is called.
type preparedReload struct {
	proxy   *proxy.Prepared
	adopter func()
	host    func()
	mesh    func() // nil without a mesh
	limits  func() // nil without a mesh
	ctrl    func() // nil without a controller
}

// prepareReload asks every component whether it takes next, reporting
// every refusal at once. Only the proxy's preparation holds anything (the
// new role ports, and its reload lock), so it comes last, once all the
// others said yes.
func (n *node) prepareReload(next *config.Config) (*preparedReload, error) {
	var p preparedReload
	var errs []error
	var err error
	if next.Controller.Enabled != n.config().Controller.Enabled {
		errs = append(errs, errors.New("controller.enabled changes only with a restart"))
	} else if n.ctrl != nil {
		if p.ctrl, err = n.ctrl.prepare(next); err != nil {
			errs = append(errs, err)
		}
	}
	if p.adopter, err = n.adopter.Prepare(adopterConfig(next, n.discover)); err != nil {
		errs = append(errs, err)
	}
	if hc, err := nodeHostConfig(next, n.id); err != nil {
		errs = append(errs, err)
	} else if p.host, err = n.host.Prepare(hc); err != nil {
		errs = append(errs, err)
	}
	if n.mesh != nil {
		if p.mesh, err = n.mesh.Prepare(meshConfig(next)); err != nil {
			errs = append(errs, err)
		}
		l := next.Mesh
		if p.limits, err = n.forwarder.PrepareLimits(l.MaxInflightPerPeer, l.MaxInflightTotal, next.Inference.Limits.MeshMaxBodyBytes); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if p.proxy, err = n.proxy.Prepare(proxyConfig(next)); err != nil {
		return nil, err
	}
	return &p, nil
}

// abort closes the proxy's new listeners; nothing else was changed.
func (p *preparedReload) abort() { p.proxy.Abort() }

// commit puts next in force in every component. The config is swapped
// first, so that the mesh's peer change (which re-applies the role
// policies) and the status read the new one; the role policies are applied
// last, once the mesh knows the new peers.
func (p *preparedReload) commit(n *node, next *config.Config, level zapcore.Level) {
	n.mu.Lock()
	n.cfg = next
	n.mu.Unlock()
	n.level.SetLevel(level)
	n.admin.SetPprof(next.Admin.Pprof)
	p.proxy.Commit()
	p.adopter()
	p.host()
	if p.mesh != nil {
		p.mesh()
		p.limits()
	}
	if p.ctrl != nil {
		// The controller's config now; its targets once its runner has
		// read the mesh's new peers (SetTargets waits for a tick).
		p.ctrl()
	}
	n.table.ApplyPolicy(n.rolePolicies(next))
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
