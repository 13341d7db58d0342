package table

import "time"

// A peer whose mesh link ended because it restarted (its new run answered
// with a stateless reset), or because it closed the link as it stopped
// gracefully (often the first half of a restart), normally links again
// within moments. Its
// routes are kept for that moment instead of being dropped, so that a new
// request arriving before the new run has linked and advertised is sent
// to it (the mesh waits for the link) rather than refused with no
// instance. While kept, the peer is "waiting for its link": its routes
// rank after every live candidate, so they never delay a request another
// node can serve, and they stop resolving at the end of the wait even
// when nobody removes them.

// KeepForRestart marks nodeID as waiting for its link for at most wait
// from now (the table's clock): its routes stay and resolve, ranked after
// every candidate with a live link, until Linked, RemoveLinking or
// RemoveNode, and stop resolving once the wait has passed. Advertisements
// ingested meanwhile (a round read from the old link late) are kept the
// same way. A non-positive wait removes the node's routes at once, as
// RemoveNode does. It bumps the generation when the node has routes.
func (a *adverts) KeepForRestart(nodeID string, wait time.Duration) {
	if wait <= 0 {
		a.RemoveNode(nodeID)
		return
	}
	var e effects
	a.c.mu.Lock()
	if a.linking == nil {
		a.linking = make(map[string]time.Time)
	}
	a.linking[nodeID] = a.c.now().Add(wait)
	if a.hasRoutesLocked(nodeID) {
		a.c.bump(&e)
	}
	a.c.mu.Unlock()
	a.c.finish(e)
}

// Linked ends nodeID's wait for its link (see KeepForRestart): a new link
// to it is up and has sent its first advertisement round, which replaced
// the kept routes; they rank as any live candidate's again. It bumps the
// generation when the node was waiting and has routes, and is cheap when
// it was not (the mesh calls it after every round).
func (a *adverts) Linked(nodeID string) {
	a.c.mu.RLock()
	_, ok := a.linking[nodeID]
	a.c.mu.RUnlock()
	if !ok {
		return
	}
	var e effects
	a.c.mu.Lock()
	if _, ok := a.linking[nodeID]; ok {
		delete(a.linking, nodeID)
		if a.hasRoutesLocked(nodeID) {
			a.c.bump(&e)
		}
	}
	a.c.mu.Unlock()
	a.c.finish(e)
}

// RemoveLinking removes nodeID's routes, as RemoveNode does, only when it
// is still waiting for its link: the end of the wait with no new link. It
// reports whether it removed anything; after Linked it does nothing, so
// the routes of a new link are never dropped by a late expiry.
func (a *adverts) RemoveLinking(nodeID string) bool {
	a.c.mu.RLock()
	_, ok := a.linking[nodeID]
	a.c.mu.RUnlock()
	if !ok {
		return false
	}
	var e effects
	a.c.mu.Lock()
	removed := false
	if _, ok := a.linking[nodeID]; ok {
		removed = a.removeNodeLocked(&e, nodeID)
	}
	a.c.mu.Unlock()
	a.c.finish(e)
	return removed
}

// waitingLocked reports whether nodeID's routes are kept waiting for its
// link at now, and whether that wait is over (they no longer resolve).
// Call with mu held.
func (a *adverts) waitingLocked(nodeID string, now time.Time) (waiting, expired bool) {
	until, ok := a.linking[nodeID]
	if !ok {
		return false, false
	}
	return true, now.After(until)
}

// hasRoutesLocked reports whether nodeID has an infer advertisement in the
// table. Call with mu held.
func (a *adverts) hasRoutesLocked(nodeID string) bool {
	for _, per := range a.remote {
		if _, ok := per.index[nodeID]; ok {
			return true
		}
	}
	return false
}
