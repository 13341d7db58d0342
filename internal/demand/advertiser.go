package demand

import (
	"slices"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/table"
)

// OwnTable is the table a controller node's Advertiser wraps
// (*table.Table): the mesh's advertisement source, and the home of the
// node's own standbys.
type OwnTable interface {
	mesh.AdvertTable
	SetOwnStandbys([]table.Standby)
}

var _ OwnTable = (*table.Table)(nil)

// Advertiser is the mesh's advertisement table on a node that runs a
// controller: the table's own advertisements, plus one standby
// advertisement (table.DemandPrefix + role) per on-demand workload of the
// Source, allowed (MeshPeerAllowed) only to the peers on its DemandFrom.
type Advertiser struct {
	tbl  OwnTable
	src  Source
	self string
}

var _ mesh.AdvertTable = (*Advertiser)(nil)

// NewAdvertiser wraps tbl, this node's (self's) table, with src's
// standbys.
func NewAdvertiser(tbl OwnTable, src Source, self string) *Advertiser {
	return &Advertiser{tbl: tbl, src: src, self: self}
}

// standbys are the Source's valid standbys, in table form.
func (a *Advertiser) standbys() []table.Standby {
	var out []table.Standby
	for _, sb := range a.src.Standby() {
		if !grammar.ValidName(sb.Role) || !validState(sb.State) || sb.MaxWait <= 0 {
			continue
		}
		out = append(out, table.Standby{Role: sb.Role, Controller: a.self, State: sb.State,
			Model: sb.Model, MaxWait: min(sb.MaxWait, table.MaxStandbyWait)})
	}
	return out
}

// Refresh tells this node's own table the Source's standbys; the table
// wakes the mesh's advert loop when they changed. The controller calls it
// on every change of a standby's state; Node.Run calls it every
// RefreshInterval as well.
func (a *Advertiser) Refresh() { a.tbl.SetOwnStandbys(a.standbys()) }

// Advertisements are the table's, then the standbys, by role.
func (a *Advertiser) Advertisements(now time.Time) []table.Advertisement {
	ads := a.tbl.Advertisements(now)
	sbs := a.standbys()
	slices.SortFunc(sbs, func(x, y table.Standby) int { return strings.Compare(x.Role, y.Role) })
	for _, sb := range sbs {
		ads = append(ads, table.StandbyAdvertisement(a.self, sb, now))
	}
	return ads
}

// MeshPeerAllowed is the table's for a role; for a standby (the name the
// mesh passes is DemandPrefix + role: the colon makes it no role's) it
// holds only for a peer on the workload's DemandFrom, by node id.
func (a *Advertiser) MeshPeerAllowed(role, peer string) bool {
	r, ok := strings.CutPrefix(role, table.DemandPrefix)
	if !ok {
		return a.tbl.MeshPeerAllowed(role, peer)
	}
	for _, sb := range a.src.Standby() {
		if sb.Role == r {
			return slices.Contains(sb.DemandFrom, peer)
		}
	}
	return false
}

// Subscribe is the table's: it wakes on the table's changes, own
// standbys included (Refresh).
func (a *Advertiser) Subscribe() (<-chan struct{}, func()) { return a.tbl.Subscribe() }
