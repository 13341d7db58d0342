package plane

// PeerStopped tells the controller that node stopped: its mesh link
// closed for shutdown (the peer's graceful stop) and no new link came
// within the mesh's restart wait (mesh.Deps.OnPeerStopped). The node is
// dead from then on, rather than after DeadAfter without contact: its
// instances are lost and move at the next tick. It is alive again as soon
// as a describe verifies. A link lost without a word does not call this,
// and still waits for DeadAfter. This node's own target and nodes that
// are not targets are ignored. Safe to call from any goroutine; it does
// not block on a tick.
func (c *Controller) PeerStopped(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.nodes[node]; ok && !n.target.Self {
		n.stopped = true
	}
}
