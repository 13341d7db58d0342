package table

import (
	"sync"
	"time"
)

// core is what every part of a Table shares: the one lock, the
// generation, the subscribers, the clock and the audit hooks. A change is
// made under mu and collected in effects; finish audits it and wakes the
// subscribers once mu is released.
type core struct {
	nodeID  string
	admit   Admission
	audit   Auditor
	refusal func(sender, kind, reason string, payload any) error
	auditFn func(kind string, err error)
	ttl     time.Duration
	now     func() time.Time
	// epoch is when the table was made, by time.Now, when now is time.Now
	// (Options.Now nil); zero otherwise. See compareNow.
	epoch   time.Time
	metrics *metrics

	// mu guards gen and all the state of the parts of the Table (locals,
	// adverts, policy, Table.proxyPorts) and of its LocalSlots. It is
	// never held while calling the Auditor, the Admission, Options.Load or
	// while waking subscribers.
	mu sync.RWMutex
	// gen counts resolution-relevant changes.
	gen uint64

	// subMu guards subs and nextSub. It is never held together with mu.
	subMu   sync.Mutex
	subs    map[uint64]chan struct{}
	nextSub uint64
}

// NodeID returns this node's id.
func (c *core) NodeID() string { return c.nodeID }

// Generation returns the number of resolution-relevant changes so far. A
// cache of Resolve or BaseURLForRole keyed on it is never stale.
func (c *core) Generation() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// effects collects what a mutation must do once the lock is released.
type effects struct {
	events []auditEvent
	notify bool
}

type auditEvent struct {
	kind    string
	payload any
}

// bump records a resolution-relevant change. Call with mu held for writing.
func (c *core) bump(e *effects) {
	c.gen++
	e.notify = true
}

// finish emits the audit events and wakes subscribers. Call without mu.
func (c *core) finish(e effects) {
	for _, ev := range e.events {
		c.record(ev.kind, ev.payload)
	}
	if e.notify {
		c.notifyAll()
	}
}

func (c *core) record(kind string, payload any) {
	if c.audit == nil {
		return
	}
	if err := c.audit.Record(AuditSource, kind, payload); err != nil {
		c.auditFailed(kind, err)
	}
}

// recordRefusal hands a refused advertisement to Options.RecordRefusal.
// Call without mu.
func (c *core) recordRefusal(sender, reason string, ev AdvertRefusedEvent) {
	if c.refusal == nil {
		return
	}
	if err := c.refusal(sender, KindAdvertRefused, reason, ev); err != nil {
		c.auditFailed(KindAdvertRefused, err)
	}
}

func (c *core) auditFailed(kind string, err error) {
	c.metrics.auditFailed()
	if c.auditFn != nil {
		c.auditFn(kind, err)
	}
}

// admitted reports whether node qualifies now. Call without mu: the
// Admission belongs to the mesh and may take its own locks.
func (c *core) admitted(node string) bool {
	return c.admit != nil && c.admit.IsAdmitted(node)
}

// compareNow is the time now for comparing with the times the table took
// from its clock (an advertisement's receipt, the end of a wait for a
// link), never to be kept or shown: resolve reads it for every request. On
// the default clock it is the epoch plus the monotonic time since, the
// monotonic reading time.Now would make, which is all that a comparison of
// two times with one uses (and every time the table takes has one), for
// one clock read where time.Now makes two (monotonic and wall). Its wall
// reading misses the wall clock's steps since the epoch.
func (c *core) compareNow() time.Time {
	if c.epoch.IsZero() {
		return c.now()
	}
	return c.epoch.Add(time.Since(c.epoch))
}

// fresh reports whether e still counts at now: within the TTL of its local
// receipt, inclusive.
func (c *core) fresh(e remoteEntry, now time.Time) bool {
	return now.Sub(e.received) <= c.ttl
}
