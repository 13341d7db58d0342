package plane

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
)

// ErrStaleFacts is returned by ingest for facts whose seq is not newer
// than the held facts' (with different content); the held facts stay.
var ErrStaleFacts = errors.New("facts not newer than the held ones")

// cachedFacts is one node's latest verified facts.
type cachedFacts struct {
	facts   facts.Facts
	meta    facts.Meta
	payload []byte
}

// nodeState is what the controller knows of one target. Guarded by
// Controller.mu.
type nodeState struct {
	target Target
	facts  *cachedFacts
	// lastContact is the last verified describe (or the controller's
	// start, for a node not heard from since).
	lastContact time.Time
	// alive is true when the latest tick's describe verified.
	alive bool
	// stopped is set when the mesh reported the node stopped (its link
	// closed for shutdown and it did not come back within the restart
	// wait: PeerStopped); it is dead at once, until it answers again.
	stopped bool
	// status is the node's instance listing from the latest tick, when
	// it gave one.
	status *ctl.StatusList
	// described is true once a describe verified; host and hostNote are
	// what the latest one said of the node's workload host (hostGate).
	described bool
	host      *ctl.HostMetadata
	hostNote  string
}

// hostGate says why n may not be placed on for what its describe said of
// its host ("" when it may, or when it has not answered yet: without
// facts the engine rejects it anyway).
func (n *nodeState) hostGate() string {
	switch {
	case !n.described:
		return ""
	case n.host == nil:
		note := n.hostNote
		if note == "" {
			note = "its describe shows no workload host"
		}
		return "not a workload host: " + note
	case !n.host.Enabled:
		return "its workload host is disabled (host.enabled false)"
	}
	return ""
}

// ingestFacts verifies s against the target's pinned key and caches it
// under the rules of reference 3.3: only verified facts; expired facts are
// never used; a node's facts are replaced only by a higher seq (the same
// seq with the same payload is unchanged, the same or a lower seq with
// another payload is stale and refused); expired held facts never block a
// restarted seq. A nil error means the describe counts as contact, even
// when the facts were stale.
func (n *nodeState) ingestFacts(s facts.Signed, now time.Time) error {
	f, meta, err := facts.Verify(s, n.target.Key, now)
	if err != nil {
		return fmt.Errorf("facts of %s: %w", n.target.ID, err)
	}
	if f.NodeID != n.target.ID {
		return fmt.Errorf("facts of %s name node %q", n.target.ID, f.NodeID)
	}
	if meta.Expired {
		return nil
	}
	held := n.facts
	if held != nil && now.Before(held.meta.ExpiresAt) {
		switch {
		case meta.Seq == held.meta.Seq && bytes.Equal(s.Payload, held.payload):
			return nil
		case meta.Seq <= held.meta.Seq:
			return fmt.Errorf("facts of %s: seq %d after %d: %w", n.target.ID, meta.Seq, held.meta.Seq, ErrStaleFacts)
		}
	}
	n.facts = &cachedFacts{facts: f, meta: meta, payload: bytes.Clone(s.Payload)}
	return nil
}

// liveness is the node's liveness at now: alive when the latest tick's
// describe verified, dead after deadAfter without contact, suspect
// between.
func (n *nodeState) liveness(now time.Time, deadAfter time.Duration) engine.Liveness {
	switch {
	case n.alive:
		return engine.Alive
	case n.dead(now, deadAfter):
		return engine.Dead
	default:
		return engine.Suspect
	}
}

// dead reports whether the node has gone deadAfter without contact. A node
// that answered in the latest tick is never dead.
func (n *nodeState) dead(now time.Time, deadAfter time.Duration) bool {
	return !n.alive && (n.stopped || now.Sub(n.lastContact) >= deadAfter)
}

// NodeStatus is one target as the controller sees it, for status pages.
type NodeStatus struct {
	ID       string
	Tier     engine.Trust
	Liveness engine.Liveness
	// LastContact is the last verified describe (the controller's start
	// for a node not heard from since).
	LastContact time.Time
	// FactsSeq and FactsExpire describe the cached facts; zero when none.
	FactsSeq    uint64
	FactsExpire time.Time
}

// Nodes returns every target's status, by node id.
func (c *readModel) Nodes() []NodeStatus {
	now := c.now()
	dead := c.conf().DeadAfter
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]NodeStatus, 0, len(c.nodes))
	for _, n := range c.nodes {
		s := NodeStatus{ID: n.target.ID, Tier: n.target.Tier, Liveness: n.liveness(now, dead), LastContact: n.lastContact}
		if n.facts != nil {
			s.FactsSeq, s.FactsExpire = n.facts.meta.Seq, n.facts.meta.ExpiresAt
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}
