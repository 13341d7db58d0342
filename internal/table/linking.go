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
func (t *Table) KeepForRestart(nodeID string, wait time.Duration) {
	if wait <= 0 {
		t.RemoveNode(nodeID)
		return
	}
	var e effects
	t.mu.Lock()
	if t.linking == nil {
		t.linking = make(map[string]time.Time)
	}
	t.linking[nodeID] = t.now().Add(wait)
	if t.hasRoutesLocked(nodeID) {
		t.bump(&e)
	}
	t.mu.Unlock()
	t.finish(e)
}

// Linked ends nodeID's wait for its link (see KeepForRestart): a new link
// to it is up and has sent its first advertisement round, which replaced
// the kept routes; they rank as any live candidate's again. It bumps the
// generation when the node was waiting and has routes, and is cheap when
// it was not (the mesh calls it after every round).
func (t *Table) Linked(nodeID string) {
	t.mu.RLock()
	_, ok := t.linking[nodeID]
	t.mu.RUnlock()
	if !ok {
		return
	}
	var e effects
	t.mu.Lock()
	if _, ok := t.linking[nodeID]; ok {
		delete(t.linking, nodeID)
		if t.hasRoutesLocked(nodeID) {
			t.bump(&e)
		}
	}
	t.mu.Unlock()
	t.finish(e)
}

// RemoveLinking removes nodeID's routes, as RemoveNode does, only when it
// is still waiting for its link: the end of the wait with no new link. It
// reports whether it removed anything; after Linked it does nothing, so
// the routes of a new link are never dropped by a late expiry.
func (t *Table) RemoveLinking(nodeID string) bool {
	t.mu.RLock()
	_, ok := t.linking[nodeID]
	t.mu.RUnlock()
	if !ok {
		return false
	}
	var e effects
	t.mu.Lock()
	removed := false
	if _, ok := t.linking[nodeID]; ok {
		removed = t.removeNodeLocked(&e, nodeID)
	}
	t.mu.Unlock()
	t.finish(e)
	return removed
}

// waitingLocked reports whether nodeID's routes are kept waiting for its
// link at now, and whether that wait is over (they no longer resolve).
// Call with mu held.
func (t *Table) waitingLocked(nodeID string, now time.Time) (waiting, expired bool) {
	until, ok := t.linking[nodeID]
	if !ok {
		return false, false
	}
	return true, now.After(until)
}

// hasRoutesLocked reports whether nodeID has an infer advertisement in the
// table. Call with mu held.
func (t *Table) hasRoutesLocked(nodeID string) bool {
	for _, per := range t.remote {
		if _, ok := per[nodeID]; ok {
			return true
		}
	}
	return false
}
