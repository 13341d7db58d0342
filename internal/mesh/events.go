package mesh

import (
	"context"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/table"
)

// The mesh reports what happens to its links (a link up or lost, a round
// of advertisements taken, the end of a restart wait, a peer removed) as
// table.PeerEvents to Deps.PeerEvents, and decides nothing about routes:
// the consumer (the table, table.ApplyPeerEvent) does. Events are queued
// under peerSet.mu, in the order of the link changes they report, and handed
// over one at a time, in that order, by one delivery at a time
// (eventQueue.deliver): never under the mesh's locks and never on the
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

// eventQueue holds the events reported and not yet delivered, and
// delivers them to the consumer one at a time, in order.
type eventQueue struct {
	sink      func(table.PeerEvent)
	onStopped func(peer string) // Deps.OnPeerStopped; may be nil
	// kick (size 1) wakes the event loop.
	kick chan struct{}
	// deliverMu is held while events are delivered, one delivery at a
	// time. It is taken before mu and before peerSet.mu, never while
	// holding either.
	deliverMu sync.Mutex

	// mu guards pending. It is taken while holding peerSet.mu (emit),
	// so that events queue in the order of the link changes they report.
	mu      sync.Mutex
	pending []queuedEvent
}

func newEventQueue(sink func(table.PeerEvent), onStopped func(string)) *eventQueue {
	return &eventQueue{sink: sink, onStopped: onStopped, kick: make(chan struct{}, 1)}
}

// emit queues ev for delivery. The caller holds peerSet.mu when the event
// reports a change it made under it.
func (q *eventQueue) emit(ev queuedEvent) {
	q.mu.Lock()
	q.pending = append(q.pending, ev)
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// loop delivers queued events until ctx ends. Run delivers what is left
// once every other goroutine has returned.
func (q *eventQueue) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.kick:
			q.deliver()
		}
	}
}

// deliver hands every queued event to the consumer, in order. One
// delivery runs at a time (deliverMu), so events are never reordered.
func (q *eventQueue) deliver() {
	q.deliverMu.Lock()
	defer q.deliverMu.Unlock()
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.mu.Unlock()
			return
		}
		e := q.pending[0]
		q.pending[0] = queuedEvent{}
		q.pending = q.pending[1:]
		q.mu.Unlock()
		if !e.until.IsZero() {
			e.ev.Wait = max(time.Until(e.until), 0)
		}
		q.sink(e.ev)
		if e.ev.Kind == table.PeerWaitOver && e.ev.Stopped && q.onStopped != nil {
			q.onStopped(e.ev.Node)
		}
		if e.done != nil {
			close(e.done)
		}
	}
}
