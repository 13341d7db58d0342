package ctlraft

import (
	"path/filepath"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/raftmesh"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/plane"
)

// Dir is raft's directory under node.data_dir.
const Dir = "raft"

// FromConfig is the store's configuration on a node with cfg: this node
// and controller.voters as the voters (a single controller is a
// one-voter cluster), raft's files in <data_dir>/raft, and the
// controller.json of a controller before raft imported once.
func FromConfig(cfg *config.Config, self string) Config {
	return Config{
		Self:       self,
		Voters:     config.VoterIDs(cfg, self),
		Dir:        filepath.Join(cfg.Node.DataDir, Dir),
		ImportPath: filepath.Join(cfg.Node.DataDir, plane.StateFile),
	}
}

// NewFromConfig builds the store of a node with cfg (FromConfig) and its
// raft layer over m, registering the layer for mesh.KindRaft streams; m
// nil is a node without a mesh (a single controller, which never dials).
// deps.Layer is set here.
func NewFromConfig(cfg *config.Config, self string, m *mesh.Mesh, deps Deps) (*Store, error) {
	rc := FromConfig(cfg, self)
	var opener raftmesh.Opener = raftmesh.NoMesh{}
	if m != nil {
		opener = m
	}
	layer, err := raftmesh.New(raftmesh.Config{Voters: rc.Voters}, raftmesh.Deps{Mesh: opener, Self: self, Logger: deps.Logger, Registerer: deps.Registerer})
	if err != nil {
		return nil, err
	}
	if m != nil {
		m.Handle(mesh.KindRaft, layer.ServeStream)
	}
	deps.Layer = layer
	return New(rc, deps)
}
