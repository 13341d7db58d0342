package table

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
)

// DemandPrefix names a standby advertisement: "demand:<role>", sent by a
// controller that can start role on demand, only to the nodes allowed to
// demand it. It resolves nothing: it tells the receiver whom to ask
// (internal/demand) while the role has no route. The colon is not in the
// role grammar, so no infer.<role> name, with its prefix cut as the mesh's
// serving filter cuts it, can be mistaken for a standby's.
const DemandPrefix = "demand:"

// Metadata keys of a standby advertisement, beside MetaRole, MetaNodeID
// (the controller's node id, which must be the sender's) and MetaModel.
const (
	// MetaState is the workload's on-demand state (StateCold, ...).
	MetaState = "state"
	// MetaMaxWaitMS is how long a request may wait for the role, in
	// decimal milliseconds, 1 to MaxStandbyWait.
	MetaMaxWaitMS = "max_wait_ms"
)

// The on-demand states a standby advertises.
const (
	StateCold     = "cold"
	StateStarting = "starting"
	StateReady    = "ready"
	StateIdle     = "idle"
)

// ReasonMalformed: a standby advertisement whose metadata is not one
// (wrong role, state or max_wait).
const ReasonMalformed = "standby advertisement is malformed"

// ReasonTooMany: a new standby advertisement while MaxStandbys are held.
const ReasonTooMany = "too many standby advertisements held"

const (
	// MaxStandbys bounds the standby advertisements a table holds from
	// peers, all senders and roles together; expired ones are dropped to
	// make room first.
	MaxStandbys = 256
	// MaxStandbyWait bounds the max_wait a standby may carry.
	MaxStandbyWait = 10 * time.Minute
)

// validState reports whether s is one of the on-demand states.
func validState(s string) bool {
	switch s {
	case StateCold, StateStarting, StateReady, StateIdle:
		return true
	}
	return false
}

// Standby is a controller's offer to start a role on demand for this node,
// as the table holds it.
type Standby struct {
	Role string
	// Controller is the node id of the controller to ask: the sender of
	// the advertisement, or this node for its own controller's.
	Controller string
	State      string
	Model      string
	MaxWait    time.Duration
}

// StandbyAdvertisement is the demand:<role> advertisement of s, sent by
// the controller nodeID at now.
func StandbyAdvertisement(nodeID string, s Standby, now time.Time) Advertisement {
	md := map[string]string{
		MetaRole:      s.Role,
		MetaNodeID:    nodeID,
		MetaState:     s.State,
		MetaMaxWaitMS: strconv.FormatInt(s.MaxWait.Milliseconds(), 10),
	}
	if s.Model != "" {
		md[MetaModel] = s.Model
	}
	return Advertisement{Name: DemandPrefix + s.Role, NodeID: nodeID, Methods: []string{},
		Version: AdvertVersion, Metadata: md, LastUpdated: now.Unix()}
}

// parseStandby reads a received standby advertisement of role from
// sender.
func parseStandby(sender, role string, ad Advertisement) (Standby, bool) {
	md := ad.Metadata
	if md[MetaRole] != role || md[MetaNodeID] != sender || !validState(md[MetaState]) {
		return Standby{}, false
	}
	ms, err := strconv.ParseInt(md[MetaMaxWaitMS], 10, 64)
	if err != nil || ms <= 0 || ms > MaxStandbyWait.Milliseconds() {
		return Standby{}, false
	}
	return Standby{Role: role, Controller: sender, State: md[MetaState], Model: md[MetaModel],
		MaxWait: time.Duration(ms) * time.Millisecond}, true
}

// standbys is the part of a Table that holds the controllers' standby
// advertisements: the peers' (fresh by the advertisement TTL, bounded by
// MaxStandbys) and this node's own controller's (SetOwnStandbys). Nothing
// here bumps the generation or wakes subscribers: no resolution depends
// on it, and the mesh's advert loop subscribes.
type standbys struct {
	c *core
	// peer: role -> controller node id -> its latest standby and receipt.
	peer map[string]map[string]standbyEntry
	n    int // entries in peer
	// own: role -> this node's controller's standby.
	own map[string]Standby
}

type standbyEntry struct {
	s        Standby
	received time.Time
}

// ingestStandby takes a demand:<role> advertisement from sender (see
// IngestAdvertisement). It is the sender's own or refused, the sender must
// be admitted, it is bounded like every advertisement, and its metadata
// must name role, the sender, a state and a max_wait within
// MaxStandbyWait. There is no use_from check: the standby says whom to
// ask, the route it leads to is checked when it is advertised.
func (t *Table) ingestStandby(sender string, ad Advertisement) bool {
	role, _ := strings.CutPrefix(ad.Name, DemandPrefix)
	if !grammar.ValidName(role) || sender == t.nodeID {
		return false
	}
	refuse := func(why string) bool {
		t.recordRefusal(sender, why, AdvertRefusedEvent{
			Role: role, Sender: sender, AdvertisedNode: ad.NodeID, Why: why,
		})
		return false
	}
	if ad.NodeID != sender {
		return refuse(ReasonOtherNode)
	}
	if !t.admitted(sender) {
		return refuse(ReasonNotAdmitted)
	}
	if !withinLimits(ad, MaxAdvertMetadata) {
		return refuse(ReasonTooLarge)
	}
	s, ok := parseStandby(sender, role, ad)
	if !ok {
		return refuse(ReasonMalformed)
	}
	now := t.now()
	t.mu.Lock()
	full := !t.putStandbyLocked(role, sender, s, now)
	t.mu.Unlock()
	if full {
		return refuse(ReasonTooMany)
	}
	return true
}

// putStandbyLocked stores sender's standby of role, making room among
// expired ones when MaxStandbys are held; it reports false when there is
// none. Call with mu held for writing.
func (s *standbys) putStandbyLocked(role, sender string, sb Standby, now time.Time) bool {
	if s.peer == nil {
		s.peer = make(map[string]map[string]standbyEntry)
	}
	if _, held := s.peer[role][sender]; !held {
		if s.n >= MaxStandbys {
			s.pruneStandbysLocked(now)
		}
		if s.n >= MaxStandbys {
			return false
		}
		if s.peer[role] == nil {
			s.peer[role] = make(map[string]standbyEntry)
		}
		s.n++
	}
	s.peer[role][sender] = standbyEntry{s: sb, received: now}
	return true
}

// pruneStandbysLocked drops the peers' expired standbys. Call with mu held
// for writing.
func (s *standbys) pruneStandbysLocked(now time.Time) {
	for role, per := range s.peer {
		for node, e := range per {
			if now.Sub(e.received) > s.c.ttl {
				delete(per, node)
				s.n--
			}
		}
		if len(per) == 0 {
			delete(s.peer, role)
		}
	}
}

// retainStandbys drops node's standbys of the roles not in roles: a round
// is whole, so a standby it no longer names was withdrawn (the controller
// no longer offers the role to this node). A link lost keeps them for
// their TTL: a controller that restarts is asked again once it is back.
func (s *standbys) retainStandbys(node string, roles []string) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	for role, per := range s.peer {
		if _, ok := per[node]; !ok || slices.Contains(roles, role) {
			continue
		}
		delete(per, node)
		s.n--
		if len(per) == 0 {
			delete(s.peer, role)
		}
	}
}

// SetOwnStandbys replaces the standbys of this node's own controller (its
// table is told in memory, not by advertisement). They count until
// replaced. A change wakes the subscribers (the mesh's advert loop), as a
// serving-side change does, without bumping the generation.
func (s *standbys) SetOwnStandbys(list []Standby) {
	own := make(map[string]Standby, len(list))
	for _, sb := range list {
		if grammar.ValidName(sb.Role) {
			sb.Controller = s.c.nodeID
			own[sb.Role] = sb
		}
	}
	var e effects
	s.c.mu.Lock()
	if !maps.Equal(s.own, own) {
		s.own = own
		e.notify = true
	}
	s.c.mu.Unlock()
	s.c.finish(e)
}

// Standbys returns the controllers that can start role for this node now:
// this node's own first, then the peers' that are fresh and admitted, by
// node id.
func (s *standbys) Standbys(role string) []Standby {
	now := s.c.now()
	s.c.mu.RLock()
	var out []Standby
	if sb, ok := s.own[role]; ok {
		out = append(out, sb)
	}
	per := s.peer[role]
	for _, node := range slices.Sorted(maps.Keys(per)) {
		if e := per[node]; now.Sub(e.received) <= s.c.ttl {
			out = append(out, e.s)
		}
	}
	s.c.mu.RUnlock()
	// Admission is the mesh's and is asked without mu held.
	return slices.DeleteFunc(out, func(sb Standby) bool {
		return sb.Controller != s.c.nodeID && !s.c.admitted(sb.Controller)
	})
}

// StandbySnapshot is a controller's standby for a role in a Snapshot.
type StandbySnapshot struct {
	Controller     string  `json:"controller"`
	State          string  `json:"state"`
	Model          string  `json:"model,omitempty"`
	MaxWaitSeconds float64 `json:"max_wait_seconds"`
	// Own: this node's own controller, told in memory.
	Own bool `json:"own,omitempty"`
	// AgeSeconds is the time since local receipt (0 for Own).
	AgeSeconds float64 `json:"age_seconds"`
	Fresh      bool    `json:"fresh"`
	Admitted   bool    `json:"admitted"`
}

// standbyRolesLocked lists the roles with a standby. Call with mu held.
func (s *standbys) standbyRolesLocked() []string {
	return append(slices.Collect(maps.Keys(s.peer)), slices.Collect(maps.Keys(s.own))...)
}

// standbySnapshotLocked lists role's standbys, own first, expired ones
// included; Admitted is filled in by fillStandbyAdmission. Call with mu
// held.
func (s *standbys) standbySnapshotLocked(role string, now time.Time) []StandbySnapshot {
	var out []StandbySnapshot
	if sb, ok := s.own[role]; ok {
		out = append(out, StandbySnapshot{Controller: sb.Controller, State: sb.State, Model: sb.Model,
			MaxWaitSeconds: sb.MaxWait.Seconds(), Own: true, Fresh: true, Admitted: true})
	}
	per := s.peer[role]
	for _, node := range slices.Sorted(maps.Keys(per)) {
		e := per[node]
		out = append(out, StandbySnapshot{Controller: node, State: e.s.State, Model: e.s.Model,
			MaxWaitSeconds: e.s.MaxWait.Seconds(), AgeSeconds: now.Sub(e.received).Seconds(),
			Fresh: now.Sub(e.received) <= s.c.ttl})
	}
	return out
}

// fillStandbyAdmission sets Admitted on the peers' standbys of rs. Call
// without mu.
func (s *standbys) fillStandbyAdmission(rs *RoleSnapshot) {
	for i := range rs.OnDemand {
		if !rs.OnDemand[i].Own {
			rs.OnDemand[i].Admitted = s.c.admitted(rs.OnDemand[i].Controller)
		}
	}
}
