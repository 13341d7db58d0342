package table

import (
	"strings"
	"time"
)

// The mesh reports what happens to its links to peers as PeerEvents, in
// the order it happened, on one path (mesh.Deps.PeerEvents, wired to
// ApplyPeerEvent); the table decides what that means for the routes. No
// send on the mesh changes a route: a stream that finds a dead link fails
// or moves to the peer's next link, and the loss reaches the table here,
// after the fact, like every other.

// PeerEventKind is what happened to a peer's mesh link.
type PeerEventKind uint8

// Kinds of PeerEvent.
const (
	// PeerLinkUp: a link to the peer became its current link. Its routes
	// change with its first round, not with the link.
	PeerLinkUp PeerEventKind = iota + 1
	// PeerRound: an advertisement round came from the peer (Adverts,
	// Round).
	PeerRound
	// PeerLinkLost: the peer's current link ended (Loss, Wait).
	PeerLinkLost
	// PeerWaitOver: the mesh stopped waiting for the next link of a peer
	// whose link ended as it restarted or stopped, and none came (Stopped).
	PeerWaitOver
	// PeerRemoved: the peer left the configuration, or its configured
	// key changed.
	PeerRemoved
)

// RoundLink is which link a round came on, as the mesh saw it when it
// took the round.
type RoundLink uint8

// Links of a PeerRound.
const (
	// RoundCurrent: the peer's current link.
	RoundCurrent RoundLink = iota
	// RoundOther: another link than the current one (a simultaneous
	// dial's loser, still draining), or none while the peer is waited for
	// after a restart (a round read from its old link late).
	RoundOther
	// RoundLate: no link and no wait: read from a link already lost,
	// whose PeerLinkLost came before.
	RoundLate
)

// LinkLoss is why a peer's link ended.
type LinkLoss uint8

// Causes of a PeerLinkLost.
const (
	// LossDropped: the link died (idle or liveness timeout, a network
	// fault), this node closed it, or the peer refused it.
	LossDropped LinkLoss = iota
	// LossRestarted: the peer answered with a stateless reset; its new
	// run links again in a moment.
	LossRestarted
	// LossStopping: the peer closed the link as it stopped gracefully,
	// often the first half of a restart.
	LossStopping
)

// PeerEvent is one thing that happened to the mesh link of a peer, Node
// (its verified node id).
type PeerEvent struct {
	Kind PeerEventKind
	Node string
	// Adverts and Round are a PeerRound's: the whole round, and the link
	// it came on.
	Adverts []Advertisement
	Round   RoundLink
	// Loss and Wait are a PeerLinkLost's: why the link ended, and how much
	// longer, from now, the mesh waits for the peer's next link (holding
	// requests to it); zero when it does not wait.
	Loss LinkLoss
	Wait time.Duration
	// Stopped is a PeerWaitOver's: the link had been closed by the peer
	// stopping, not reset by its new run.
	Stopped bool
}

// ApplyPeerEvent updates the routes for what happened to a peer's link.
// It is the table's only consumer of the mesh's reports, and the rules
// are:
//
//   - A round replaces the peer's routes: each advertisement is ingested
//     (and checked, see IngestAdvertisement) and the roles it no longer
//     names are dropped (RetainRemote). A round on the current link ends
//     a wait for the link (Linked). A late round is ignored: the loss
//     before it dropped the routes, which it would only bring back until
//     their TTL ran out.
//   - A link that ended as the peer restarted or stopped keeps its routes
//     for the mesh's wait (KeepForRestart), ranked last; any other loss,
//     or one the mesh does not wait after, drops them at once
//     (RemoveNode), so failover never waits.
//   - The end of a wait with no new link drops routes still waiting
//     (RemoveLinking; a round of a new link ended the wait before).
//   - A peer removed from the configuration loses its routes at once.
//   - A new link changes nothing until its first round.
func (t *Table) ApplyPeerEvent(ev PeerEvent) {
	switch ev.Kind {
	case PeerRound:
		if ev.Round == RoundLate {
			return
		}
		var roles, standbys []string
		for _, ad := range ev.Adverts {
			t.IngestAdvertisement(ev.Node, ad)
			if role, ok := strings.CutPrefix(ad.Name, ServicePrefix); ok {
				roles = append(roles, role)
			}
			if role, ok := strings.CutPrefix(ad.Name, DemandPrefix); ok {
				standbys = append(standbys, role)
			}
		}
		// A round is whole: what it no longer names was withdrawn.
		t.RetainRemote(ev.Node, roles)
		t.retainStandbys(ev.Node, standbys)
		if ev.Round == RoundCurrent {
			t.Linked(ev.Node)
		}
	case PeerLinkLost:
		if ev.Loss != LossDropped && ev.Wait > 0 {
			t.KeepForRestart(ev.Node, ev.Wait)
		} else {
			t.RemoveNode(ev.Node)
		}
	case PeerWaitOver:
		t.RemoveLinking(ev.Node)
	case PeerRemoved:
		t.RemoveNode(ev.Node)
	}
}
