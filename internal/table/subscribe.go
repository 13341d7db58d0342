package table

import "sync"

// Subscribe returns a channel that receives after every change of the
// table, and a cancel func that unsubscribes (idempotent; the channel is
// not closed). The channel has a buffer of one and changes coalesce: a
// subscriber that is slow sees one wake-up for many changes and must re-read
// the table, never count wake-ups. A writer never blocks on a subscriber.
//
// Wake-ups follow every generation bump and also serving-side changes
// (AllowMeshPeer, SetProxyPort) that do not bump the generation.
func (t *Table) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	t.subMu.Lock()
	id := t.nextSub
	t.nextSub++
	t.subs[id] = ch
	t.subMu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			t.subMu.Lock()
			delete(t.subs, id)
			t.subMu.Unlock()
		})
	}
}

// notifyAll wakes every subscriber without blocking. Call without mu.
func (t *Table) notifyAll() {
	t.subMu.Lock()
	defer t.subMu.Unlock()
	for _, ch := range t.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}
