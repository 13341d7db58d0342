package plane

import "context"

// The operator's reads and verbs, answered by the controller's parts
// (controller.go names them).

// Placements returns a copy of every placement, by decision id.
func (c *Controller) Placements() []Placement {
	c.refreshReplica()
	return c.read.Placements()
}

// Declarations returns every declared workload with its state and last
// reason, by name.
func (c *Controller) Declarations() []DeclarationView {
	c.refreshReplica()
	return c.read.Declarations()
}

// Nodes returns every target's status, by node id.
func (c *Controller) Nodes() []NodeStatus { return c.read.Nodes() }

// NodeViews returns every target's view, by node id.
func (c *Controller) NodeViews() []NodeView { return c.read.NodeViews() }

// Recent returns the report of decision id when it is one of the last
// MaxRecentReports decisions this controller made since it started.
func (c *Controller) Recent(id string) (Report, bool) { return c.read.Recent(id) }

// RecentIDs returns the decision ids Recent knows, oldest first.
func (c *Controller) RecentIDs() []string { return c.read.RecentIDs() }

// Stop stops the instance of placement ref on its node (verbs.go).
func (c *Controller) Stop(ctx context.Context, ref string) (Placement, error) {
	if err := c.notLeader(); err != nil {
		return Placement{}, err
	}
	return c.ops.Stop(ctx, ref)
}

// Unload unloads the instance of placement ref and forgets the placement
// (verbs.go).
func (c *Controller) Unload(ctx context.Context, ref string) (Placement, error) {
	if err := c.notLeader(); err != nil {
		return Placement{}, err
	}
	return c.ops.Unload(ctx, ref)
}

// Start starts the stopped instance of placement ref again (verbs.go).
func (c *Controller) Start(ctx context.Context, ref string) (Placement, error) {
	if err := c.notLeader(); err != nil {
		return Placement{}, err
	}
	return c.ops.Start(ctx, ref)
}
