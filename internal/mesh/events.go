package mesh

import (
	"context"
	"time"

	"github.com/nodeld/nodeld/internal/table"
)

// The mesh reports what happens to its links (a link up or lost, a round
// of advertisements taken, the end of a restart wait, a peer removed) as
// table.PeerEvents to Deps.PeerEvents, and decides nothing about routes:
// the consumer (the table, table.ApplyPeerEvent) does. Events are queued
// under m.mu, in the order of the link changes they report, and handed
// over one at a time, in that order, by one delivery at a time
// (deliverPending): never under the mesh's locks and never on the
// goroutine of a caller of OpenStream or of a stream, so a send on the
// mesh never changes routing under its caller. The queue is bounded by
// what feeds it: a round's stream waits for its delivery before it is
// acknowledged (so rounds queued are at most the advert streams in
// progress, themselves bounded per link), and the rest are link changes.

// queuedEvent is a reported event waiting for delivery.
type queuedEvent struct {
	ev table.PeerEvent
	// until, for a PeerLinkLost the mesh waits after, is when its wait
	// ends: Wait is what is left of it at delivery.
	until time.Time
	// done, when set, is closed once the event was delivered.
	done chan struct{}
}

// emitLocked queues ev for delivery. m.mu must be held.
func (m *Mesh) emitLocked(q queuedEvent) {
	m.events = append(m.events, q)
	select {
	case m.eventKick <- struct{}{}:
	default:
	}
}

// eventLoop delivers queued events until ctx ends. Run delivers what is
// left once every other goroutine has returned.
func (m *Mesh) eventLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.eventKick:
			m.deliverPending()
		}
	}
}

// deliverPending hands every queued event to the consumer, in order. One
// delivery runs at a time (deliverMu), so events are never reordered.
func (m *Mesh) deliverPending() {
	m.deliverMu.Lock()
	defer m.deliverMu.Unlock()
	for {
		m.mu.Lock()
		if len(m.events) == 0 {
			m.mu.Unlock()
			return
		}
		q := m.events[0]
		m.events[0] = queuedEvent{}
		m.events = m.events[1:]
		m.mu.Unlock()
		if !q.until.IsZero() {
			q.ev.Wait = max(time.Until(q.until), 0)
		}
		m.sink(q.ev)
		if q.ev.Kind == table.PeerWaitOver && q.ev.Stopped && m.onStopped != nil {
			m.onStopped(q.ev.Node)
		}
		if q.done != nil {
			close(q.done)
		}
	}
}

// deliverIfIdle delivers queued events at once when no event loop runs
// (before Run, or after it returned: a config change then).
func (m *Mesh) deliverIfIdle() {
	m.mu.Lock()
	idle := m.runCtx == nil
	m.mu.Unlock()
	if idle {
		m.deliverPending()
	}
}
