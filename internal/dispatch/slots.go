package dispatch

import (
	"context"
	"sync"
)

// peerSlots bounds the artifact streams served to each peer at once. A
// peer has an entry only while one of its authorised fetches holds or
// waits for a slot, so the map is bounded by the peers that offers
// target (MaxOffers).
type peerSlots struct {
	per int

	// mu guards byPeer and every peerSem's users.
	mu     sync.Mutex
	byPeer map[string]*peerSem
}

// peerSem is one peer's semaphore.
type peerSem struct {
	slots chan struct{} // capacity per
	users int           // streams holding or waiting for a slot
}

func newPeerSlots(per int) *peerSlots {
	return &peerSlots{per: per, byPeer: make(map[string]*peerSem)}
}

// take waits for one of peer's slots until ctx ends. It reports false
// when ctx ended first; otherwise release gives the slot back.
func (p *peerSlots) take(ctx context.Context, peer string) (release func(), ok bool) {
	p.mu.Lock()
	s := p.byPeer[peer]
	if s == nil {
		s = &peerSem{slots: make(chan struct{}, p.per)}
		p.byPeer[peer] = s
	}
	s.users++
	p.mu.Unlock()
	leave := func() {
		p.mu.Lock()
		s.users--
		if s.users == 0 {
			delete(p.byPeer, peer)
		}
		p.mu.Unlock()
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, false
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-s.slots
			leave()
		})
	}, true
}

// peers counts the peers holding or waiting for a slot.
func (p *peerSlots) peers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byPeer)
}
