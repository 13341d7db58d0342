package demand

import (
	"context"
	"errors"
	"sync/atomic"
)

// ErrNoOnDemand is a demand's error while no controller is bound to a
// Deferred.
var ErrNoOnDemand = errors.New("this controller offers no on-demand workloads")

// Deferred is a Controller bound after its users are built: the
// advertiser and the Server of a node that runs the controller exist
// before the controller does (the mesh they feed is built first). Until
// Bind it offers no standby and refuses every demand with ErrNoOnDemand.
type Deferred struct {
	c atomic.Pointer[Controller]
}

var _ Controller = (*Deferred)(nil)

// Bind makes c the controller; safe while the others read.
func (d *Deferred) Bind(c Controller) { d.c.Store(&c) }

// Standby is the bound controller's standbys; none before Bind.
func (d *Deferred) Standby() []Standby {
	if c := d.c.Load(); c != nil {
		return (*c).Standby()
	}
	return nil
}

// Demand hands the demand to the bound controller.
func (d *Deferred) Demand(ctx context.Context, role, from string) (string, error) {
	if c := d.c.Load(); c != nil {
		return (*c).Demand(ctx, role, from)
	}
	return "", ErrNoOnDemand
}
