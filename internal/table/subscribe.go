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
func (c *core) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.subMu.Lock()
	id := c.nextSub
	c.nextSub++
	c.subs[id] = ch
	c.subMu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			c.subMu.Lock()
			delete(c.subs, id)
			c.subMu.Unlock()
		})
	}
}

// notifyAll wakes every subscriber without blocking. Call without mu.
func (c *core) notifyAll() {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	for _, ch := range c.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}
