package table

import (
	"slices"
	"time"
)

// adverts holds what peers told this node about the roles they serve,
// kept per sender from local receipt: their infer.<role> advertisements
// (the remote routes), their workload-host advertisements (which route
// nothing), and, for a peer whose link ended as it restarted, until when
// its routes wait for its next link. Whether a route may be used (use_from,
// admission) is decided where it is read, not here. State a peer's word
// makes about a role besides a live route (a role it can start on demand,
// a role expected back) belongs here too.
type adverts struct {
	c *core
	// remote: role -> its senders' latest advertisements.
	remote map[string]*roleAdverts
	// hosts: sender node id -> its latest workload-host advertisement;
	// one per admitted sender, dropped by RemoveNode.
	hosts map[string]remoteEntry
	// linking: node id -> until when its routes are kept waiting for
	// its link after it restarted (KeepForRestart); nil until first used.
	linking map[string]time.Time
}

// roleAdverts are one role's advertisements, each sender's latest: in a
// slice, which resolve ranges over for every request (a map's iterator
// costs more than the few entries it yields), with each sender's index in
// it. An entry's sender is its cand.node.
type roleAdverts struct {
	index   map[string]int // sender -> its entry's index in entries
	entries []remoteEntry
}

func (r *roleAdverts) get(sender string) (remoteEntry, bool) {
	i, ok := r.index[sender]
	if !ok {
		return remoteEntry{}, false
	}
	return r.entries[i], true
}

// put stores e, whose cand.node is sender, over sender's entry.
func (r *roleAdverts) put(sender string, e remoteEntry) {
	if i, ok := r.index[sender]; ok {
		r.entries[i] = e
		return
	}
	r.index[sender] = len(r.entries)
	r.entries = append(r.entries, e)
}

// remove forgets sender's entry, moving the last one into its place, and
// reports whether there was one.
func (r *roleAdverts) remove(sender string) bool {
	i, ok := r.index[sender]
	if !ok {
		return false
	}
	last := len(r.entries) - 1
	if i != last {
		r.entries[i] = r.entries[last]
		r.index[r.entries[i].cand.node] = i
	}
	r.entries[last] = remoteEntry{}
	r.entries = r.entries[:last]
	delete(r.index, sender)
	return true
}

func newAdverts(c *core) adverts {
	return adverts{
		c:      c,
		remote: make(map[string]*roleAdverts),
		hosts:  make(map[string]remoteEntry),
	}
}

// putLocked stores sender's advertisement of role, received at now, over
// its previous one, and reports whether that is a change a resolution may
// see: the sender is new for the role, its previous entry had expired, or
// its methods or its metadata other than load changed. Call with mu held
// for writing.
func (a *adverts) putLocked(role, sender string, ad Advertisement, now time.Time) bool {
	per := a.remote[role]
	if per == nil {
		per = &roleAdverts{index: make(map[string]int)}
		a.remote[role] = per
	}
	prev, had := per.get(sender)
	changed := !had || !a.c.fresh(prev, now) ||
		!slices.Equal(prev.ad.Methods, ad.Methods) ||
		!metadataEqualButLoad(prev.ad.Metadata, ad.Metadata)
	per.put(sender, remoteEntry{ad: cloneAdvert(ad), cand: candidateOf(sender, ad), received: now})
	return changed
}

// RetainRemote keeps only the given roles of what nodeID advertised and
// forgets the rest; its workload-host advertisement is not a role and is
// left alone (it goes with its TTL or RemoveNode). The mesh calls it with the roles of a complete round
// of a peer's advertisements, so a role the peer stopped serving stops
// resolving at once rather than when its TTL runs out.
func (a *adverts) RetainRemote(nodeID string, roles []string) {
	keep := make(map[string]bool, len(roles))
	for _, r := range roles {
		keep[r] = true
	}
	var e effects
	a.c.mu.Lock()
	removed := false
	for role, per := range a.remote {
		if keep[role] {
			continue
		}
		if per.remove(nodeID) {
			removed = true
		}
		if len(per.entries) == 0 {
			delete(a.remote, role)
		}
	}
	if removed {
		a.c.bump(&e)
	}
	a.c.mu.Unlock()
	a.c.finish(e)
}

// RemoveNode forgets every advertisement of nodeID (the peer left or was
// revoked), its workload-host advertisement included, and ends any wait
// for its link (KeepForRestart). It bumps the generation when an infer
// advertisement was removed.
func (a *adverts) RemoveNode(nodeID string) {
	var e effects
	a.c.mu.Lock()
	a.removeNodeLocked(&e, nodeID)
	a.c.mu.Unlock()
	a.c.finish(e)
}

// removeNodeLocked is RemoveNode with mu held for writing; it reports
// whether an infer advertisement was removed.
func (a *adverts) removeNodeLocked(e *effects, nodeID string) bool {
	delete(a.hosts, nodeID)
	delete(a.linking, nodeID)
	removed := false
	for role, per := range a.remote {
		if per.remove(nodeID) {
			removed = true
		}
		if len(per.entries) == 0 {
			delete(a.remote, role)
		}
	}
	if removed {
		a.c.bump(e)
	}
	return removed
}
