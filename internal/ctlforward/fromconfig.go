package ctlforward

import (
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/mesh"
)

// NewFromConfig is the forwarder of a node with cfg: the controller voters
// of controller.voters (config.VoterIDs) when this node runs a controller
// with voters and a mesh, else none (it forwards and serves nothing); New
// registers its handler on m.
func NewFromConfig(cfg *config.Config, self string, m *mesh.Mesh, deps Deps) (*Forwarder, error) {
	var c Config
	if m != nil && cfg.Controller.Enabled && len(cfg.Controller.Voters) > 0 {
		c.Voters = config.VoterIDs(cfg, self)
		deps.Mesh = m
	}
	deps.Self = self
	f, err := New(c, deps)
	if err == nil && len(c.Voters) > 0 {
		f.log.Info("controller writes forwarded between the voters", zap.Strings("voters", f.sortedVoters()))
	}
	return f, err
}
