package table

import (
	"maps"
	"slices"
	"time"
)

// HostAdvertName is the name of a workload host's advertisement
// (ctl.HostAdvertName, spelled here because the table imports no ctl; a
// test of the host holds the two equal). The table keeps the latest one of
// each admitted peer for a controller (HostAdverts) and for status; it
// names no role and never resolves.
const HostAdvertName = "workload-host"

// HostAdvert is a peer's workload-host advertisement as the table holds
// it.
type HostAdvert struct {
	Advertisement Advertisement
	// Received is when this node took it (Options.Now); its freshness
	// counts from here, never from the peer's LastUpdated.
	Received time.Time
}

// ingestHost takes a workload-host advertisement from sender (see
// IngestAdvertisement). It is the sender's own or refused, the sender must
// be admitted, and it is bounded like every advertisement but with room
// for the host's labels (MaxHostAdvertMetadata). There is no allowlist:
// every admitted peer may say it runs a host.
//
// It replaces the sender's previous one and restarts its TTL, and neither
// bumps the generation (no resolution depends on it) nor wakes
// subscribers: the mesh's advert loop subscribes, and waking it for every
// host advertisement received would answer each round with a round.
func (a *adverts) ingestHost(sender string, ad Advertisement) bool {
	refuse := func(why string) bool {
		a.c.recordRefusal(sender, why, AdvertRefusedEvent{
			Name: ad.Name, Sender: sender, AdvertisedNode: ad.NodeID, Why: why,
		})
		return false
	}
	if ad.NodeID != sender {
		return refuse(ReasonOtherNode)
	}
	if !a.c.admitted(sender) {
		return refuse(ReasonNotAdmitted)
	}
	if !withinLimits(ad, MaxHostAdvertMetadata) {
		return refuse(ReasonTooLarge)
	}
	ad = cloneAdvert(ad)
	a.c.mu.Lock()
	a.hosts[sender] = remoteEntry{ad: ad, received: a.c.now()}
	a.c.mu.Unlock()
	return true
}

// HostAdverts returns the workload-host advertisement of every peer that
// sent one within the TTL and is admitted now, by node id. The map and
// the advertisements are copies.
func (a *adverts) HostAdverts() map[string]HostAdvert {
	now := a.c.now()
	a.c.mu.RLock()
	out := make(map[string]HostAdvert, len(a.hosts))
	for node, e := range a.hosts {
		if a.c.fresh(e, now) {
			out[node] = HostAdvert{Advertisement: cloneAdvert(e.ad), Received: e.received}
		}
	}
	a.c.mu.RUnlock()
	// Admission is the mesh's and is asked without mu held.
	for node := range out {
		if !a.c.admitted(node) {
			delete(out, node)
		}
	}
	return out
}

// HostSnapshot is a peer's workload-host advertisement in a Snapshot.
type HostSnapshot struct {
	Node     string            `json:"node"`
	Version  string            `json:"version"`
	Metadata map[string]string `json:"metadata"`
	// AgeSeconds is the time since local receipt.
	AgeSeconds float64 `json:"age_seconds"`
	Fresh      bool    `json:"fresh"`
	Admitted   bool    `json:"admitted"`
}

// hostsSnapshotLocked lists the held host advertisements, sorted by node
// id, expired ones included; Admitted is left for the caller to fill in
// without mu. Call with mu held.
func (a *adverts) hostsSnapshotLocked(now time.Time) []HostSnapshot {
	out := make([]HostSnapshot, 0, len(a.hosts))
	for _, node := range slices.Sorted(maps.Keys(a.hosts)) {
		e := a.hosts[node]
		out = append(out, HostSnapshot{
			Node: node, Version: e.ad.Version, Metadata: maps.Clone(e.ad.Metadata),
			AgeSeconds: now.Sub(e.received).Seconds(), Fresh: a.c.fresh(e, now),
		})
	}
	return out
}
