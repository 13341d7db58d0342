package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/demand"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/plane"
)

// newDemandAdvertiser is the mesh's advertisement table: the node's table
// plus the standby advertisements of its controller's on-demand workloads,
// each only to the nodes on its demand_from. The controller is built after
// the mesh (bindDemand); until then, and on a node without one, there are
// none.
func newDemandAdvertiser(n *node, nd nodeDeps) *demand.Advertiser {
	n.demandCtl = &lateDemand{}
	return demand.NewAdvertiser(n.table, n.demandCtl, nd.id.ID())
}

// newDemand builds the node's demand side: the Client and the Holds every
// node has (the proxy's hold plug), and on a node that runs the
// controller the Server of the KindDemand stream, which refuses
// unknown_role until the controller offers on-demand workloads.
func newDemand(n *node, cfg *config.Config, nd nodeDeps, adv *demand.Advertiser) (*demand.Node, error) {
	deps := demand.Deps{Key: nd.id.PrivateKey(), Table: n.table, Recorder: n.rec,
		Logger: nd.log.Named("demand"), Registerer: nd.reg, Now: nd.now}
	if n.mesh != nil { // never a typed nil in the interface
		deps.Mesh = n.mesh
	}
	if cfg.Controller.Enabled {
		deps.Controller, deps.Advertiser = n.demandCtl, adv
	}
	dn, err := demand.New(deps)
	if err != nil {
		return nil, err
	}
	if dn.Server != nil && n.mesh != nil {
		n.mesh.Handle(mesh.KindDemand, dn.Server.ServeStream)
	}
	return dn, nil
}

// bindDemand gives the demand side the controller, once it is built, if
// it offers on-demand workloads (implements demand.Controller), with the
// roles of its on-demand workloads learnt: its first advert round carries
// their standbys (a restarted controller withdraws none). newNode calls
// it before run starts anything.
func (n *node) bindDemand() {
	if n.ctrl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), learnRolesTimeout)
	defer cancel()
	n.ctrl.LearnRoles(ctx)
	n.demandCtl.bind(planeDemand{n.ctrl})
}

// learnRolesTimeout bounds reading the on-demand workloads' packages at
// start; what is not read by then is read on the ticks.
const learnRolesTimeout = 10 * time.Second

// planeDemand is the controller as the demand side sees it: its
// on-demand workloads (Standby) and the demands it takes.
type planeDemand struct{ c *plane.Controller }

func (p planeDemand) Standby() []demand.Standby {
	sbs := p.c.Standby()
	out := make([]demand.Standby, len(sbs))
	for i, s := range sbs {
		out[i] = demand.Standby{Role: s.Role, Workload: s.Workload, Model: s.Model,
			MaxWait: s.MaxWait, DemandFrom: s.DemandFrom, State: s.State}
	}
	return out
}

func (p planeDemand) Demand(ctx context.Context, role, from string) (string, error) {
	return p.c.Demand(ctx, role, from)
}

// lateDemand is the controller's demand side as the advertiser and the
// demand server see it: none until bindDemand (the mesh, which the
// advertiser feeds, is built before the controller).
type lateDemand struct {
	c atomic.Pointer[demand.Controller]
}

var errNoOnDemand = errors.New("this controller offers no on-demand workloads")

func (l *lateDemand) bind(c demand.Controller) { l.c.Store(&c) }

func (l *lateDemand) Standby() []demand.Standby {
	if c := l.c.Load(); c != nil {
		return (*c).Standby()
	}
	return nil
}

func (l *lateDemand) Demand(ctx context.Context, role, from string) (string, error) {
	if c := l.c.Load(); c != nil {
		return (*c).Demand(ctx, role, from)
	}
	return "", errNoOnDemand
}
