package meshproxy

import "github.com/nodeld/nodeld/internal/config"

// LimitsFromConfig maps the forwarder's limits (mesh.max_inflight_per_peer,
// mesh.max_inflight_total, inference.limits.mesh_max_body_bytes): the one
// mapping config check, run and a reload use.
func LimitsFromConfig(cfg *config.Config) Limits {
	return Limits{PerPeer: cfg.Mesh.MaxInflightPerPeer, Total: cfg.Mesh.MaxInflightTotal, MaxBody: cfg.Inference.Limits.MeshMaxBodyBytes}
}

// CheckConfig is CheckLimits on the config's limits, one key at a time (0
// is the forwarder's default), so that each problem names its key: each a
// *config.ValidationError at its line.
func CheckConfig(cfg *config.Config) []error {
	l := LimitsFromConfig(cfg)
	var errs []error
	for _, c := range []struct {
		path string
		err  error
	}{
		{"mesh.max_inflight_per_peer", CheckLimits(l.PerPeer, 0, 0)},
		{"mesh.max_inflight_total", CheckLimits(0, l.Total, 0)},
		{"inference.limits.mesh_max_body_bytes", CheckLimits(0, 0, l.MaxBody)},
	} {
		if c.err != nil {
			errs = append(errs, &config.ValidationError{Line: cfg.Line(c.path), Path: c.path, Msg: c.err.Error()})
		}
	}
	return errs
}
