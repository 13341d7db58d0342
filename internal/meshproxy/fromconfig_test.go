package meshproxy

import (
	"testing"

	"github.com/nodeld/nodeld/internal/config"
)

// TestCheckConfigNamesEachKey: each limit out of range is its own problem
// at its own key; the defaults have none.
func TestCheckConfigNamesEachKey(t *testing.T) {
	cfg := config.Default()
	if errs := CheckConfig(cfg); len(errs) != 0 {
		t.Fatalf("defaults: %v", errs)
	}
	cfg.Mesh.MaxInflightPerPeer = MaxMeshInflight + 1
	cfg.Inference.Limits.MeshMaxBodyBytes = -1
	errs := CheckConfig(cfg)
	var paths []string
	for _, err := range errs {
		paths = append(paths, err.(*config.ValidationError).Path)
	}
	if len(paths) != 2 || paths[0] != "mesh.max_inflight_per_peer" || paths[1] != "inference.limits.mesh_max_body_bytes" {
		t.Fatalf("problems at %v, want per-peer and mesh body bytes", paths)
	}
	if l := LimitsFromConfig(cfg); l.PerPeer != MaxMeshInflight+1 || l.MaxBody != -1 {
		t.Fatalf("LimitsFromConfig = %+v", l)
	}
}
