package plane

import (
	"context"
	"time"

	"github.com/nodeld/nodeld/internal/demand"
)

// LearnRolesTimeout bounds reading the on-demand workloads' packages when
// a DemandSide is made; what is not read by then is read on the ticks.
const LearnRolesTimeout = 10 * time.Second

// DemandSide is the controller as the demand side sees it
// (demand.Controller): its on-demand workloads' standbys and the demands
// it takes.
type DemandSide struct{ c *Controller }

var _ demand.Controller = DemandSide{}

// NewDemandSide learns the roles of c's on-demand workloads first (at
// most LearnRolesTimeout), so that its first advert round carries their
// standbys (a restarted controller withdraws none).
func NewDemandSide(c *Controller) DemandSide {
	ctx, cancel := context.WithTimeout(context.Background(), LearnRolesTimeout)
	defer cancel()
	c.LearnRoles(ctx)
	return DemandSide{c}
}

// Standby is the controller's standbys in the demand side's form.
func (d DemandSide) Standby() []demand.Standby {
	sbs := d.c.Standby()
	out := make([]demand.Standby, len(sbs))
	for i, s := range sbs {
		out[i] = demand.Standby{Role: s.Role, Workload: s.Workload, Model: s.Model,
			MaxWait: s.MaxWait, DemandFrom: s.DemandFrom, State: s.State}
	}
	return out
}

// Demand hands an allowed demand to the controller.
func (d DemandSide) Demand(ctx context.Context, role, from string) (string, error) {
	return d.c.Demand(ctx, role, from)
}
