package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/meshproxy"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/table"
)

// checkComponents runs, on a config that passed config.Validate, every
// component's own static check of the part it would be given: the proxy's,
// the runner's (instances and discovery), the mesh's, the mesh
// forwarder's limits, the host's (labels as the signed facts take them),
// the controller's and the placement table's (role names). config check, run and a reload
// all run it, so a file config check accepts is one run accepts. Each
// problem is a *config.ValidationError at the config line it comes from
// where that is known; together they are a *config.FileError naming file.
func checkComponents(cfg *config.Config, file string) error {
	var errs []error
	add := func(path string, err error) {
		errs = append(errs, &config.ValidationError{Line: cfg.Line(path), Path: path, Msg: err.Error()})
	}
	for _, err := range problems(proxy.FromConfig(cfg).Validate()) {
		add("inference.roles", err)
	}
	if err := runner.AdopterFromConfig(cfg, nil).Validate(); err != nil {
		var ce *runner.ConfigError
		if !errors.As(err, &ce) {
			add("inference", err)
		} else {
			for _, p := range ce.Problems {
				var ie *runner.InstanceError
				if !errors.As(p, &ie) {
					add("inference", p)
					continue
				}
				path := fmt.Sprintf("inference.instances[%d]", ie.Index)
				if key := instanceKey(ie.Field); key != "" {
					path += "." + key
				}
				add(path, ie.Err)
			}
		}
	}
	if cfg.Mesh.Listen != "" {
		for _, err := range problems(mesh.FromConfig(cfg).Validate(nil)) {
			add("mesh", err)
		}
		errs = append(errs, meshproxy.CheckConfig(cfg)...)
	}
	if hc, err := host.FromConfig(cfg, nil); err != nil {
		add("host", err)
	} else {
		for _, err := range problems(host.CheckConfig(hc)) {
			if errors.Is(err, facts.ErrInvalidFacts) {
				for _, lerr := range problems(err) { // one per label
					add("node.labels", lerr)
				}
			} else {
				add("host", err)
			}
		}
	}
	// The controller's own check of its config (node references are
	// resolved at run time; here they are checked as written).
	for _, err := range problems(plane.ConfigOf(cfg, nil).Validate()) {
		add("controller", err)
	}
	if _, err := plane.Anchors(cfg); err != nil {
		add("controller.trust_anchors", err)
	}
	// One role at a time, so each problem names its role's line. The
	// allowlists' node ids come from the mesh, which never makes an empty
	// one: only the names are checked here.
	for i, r := range cfg.Inference.Roles {
		if err := table.CheckPolicy(map[string]table.RolePolicy{r.Name: {Expose: r.Expose}}); err != nil {
			add(fmt.Sprintf("inference.roles[%d].name", i), err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b error) int {
		return a.(*config.ValidationError).Line - b.(*config.ValidationError).Line
	})
	return &config.FileError{File: file, Errs: errs}
}

// instanceKey is the config key of a runner instance field ("" for none).
func instanceKey(field string) string {
	switch field {
	case runner.FieldRole:
		return "role"
	case runner.FieldKind:
		return "runtime"
	case runner.FieldURL:
		return "url"
	case runner.FieldModel:
		return "model"
	}
	return ""
}

// problems undoes one errors.Join (or a component's joined problems); nil
// gives none.
func problems(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
