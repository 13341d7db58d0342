package ctl

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrPeerNonceQuota is returned by PeerNonceGuard.Admit when the peer
// already holds its quota of live nonces: it fails closed for that peer
// alone.
var ErrPeerNonceQuota = errors.New("this peer holds its quota of live nonces")

// PeerNonceLimits bound a PeerNonceGuard. Zero fields take the defaults
// in parentheses.
type PeerNonceLimits struct {
	// PerPeer is how many live nonces one peer may hold (MaxPeerNonces).
	PerPeer int
	// Shared bounds the live nonces held beyond the peers' reserves, all
	// peers together (MaxNonces).
	Shared int
	// Reserve is how many live nonces each peer may hold whatever the
	// others hold (PeerNonceReserve); at most PerPeer.
	Reserve int
	// Peers bounds the peers holding live nonces at once
	// (MaxNoncePeers), and so the nonces held in reserve.
	Peers int
}

// PeerNonceGuard remembers the nonces of the peers that are not
// controllers (read-only calls: describe, status, logs) until their
// request expires, with a quota per peer, so that one admitted peer
// flooding calls cannot fill it and lock the other peers out.
//
// A peer's first Reserve nonces are its own; the rest come from a pool of
// Shared nonces for all peers; no peer holds more than PerPeer. So one
// peer holds at most PerPeer, Shared/PerPeer peers flooding together are
// needed to take the pool, and even then every other peer keeps its
// reserve. It holds at most Shared + Reserve*Peers nonces, and fails
// closed (an error, the call refused as replay) rather than forget a live
// one. Expired nonces are dropped on every Admit, earliest expiry first
// (a heap), so a peer's quota frees as its requests expire, not when the
// guard fills. A request is refused once it expires (Verifier step 7,
// before the guard), so forgetting an expired nonce can never admit a
// replay. It is safe for concurrent use.
type PeerNonceGuard struct {
	lim PeerNonceLimits

	// mu guards seen, expiry, perPeer and shared.
	mu sync.Mutex
	// seen holds the live nonces, each also in expiry.
	seen map[peerNonce]struct{}
	// expiry orders them by expiry, earliest first.
	expiry nonceHeap
	// perPeer counts each peer's nonces; a peer without any has no entry.
	perPeer map[string]int
	// shared counts the nonces beyond each peer's reserve.
	shared int
}

// peerNonce is one peer's nonce.
type peerNonce struct{ peer, nonce string }

// nonceExpiry is a nonce and its request's expiry in Unix milliseconds.
type nonceExpiry struct {
	key peerNonce
	ms  int64
}

// nonceHeap is a min-heap of nonces by expiry.
type nonceHeap []nonceExpiry

func (h nonceHeap) Len() int           { return len(h) }
func (h nonceHeap) Less(i, j int) bool { return h[i].ms < h[j].ms }
func (h nonceHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nonceHeap) Push(x any)        { *h = append(*h, x.(nonceExpiry)) }
func (h *nonceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nonceExpiry{}
	*h = old[:len(old)-1]
	return x
}

// NewPeerNonceGuard returns an empty guard with lim, zero fields taking
// their defaults. Negative fields, or a reserve above the per-peer quota,
// are an error.
func NewPeerNonceGuard(lim PeerNonceLimits) (*PeerNonceGuard, error) {
	if lim.PerPeer < 0 || lim.Shared < 0 || lim.Reserve < 0 || lim.Peers < 0 {
		return nil, fmt.Errorf("peer nonce guard: negative limit in %+v", lim)
	}
	lim.PerPeer = cmp.Or(lim.PerPeer, MaxPeerNonces)
	lim.Shared = cmp.Or(lim.Shared, MaxNonces)
	lim.Reserve = cmp.Or(lim.Reserve, min(PeerNonceReserve, lim.PerPeer))
	lim.Peers = cmp.Or(lim.Peers, MaxNoncePeers)
	if lim.Reserve > lim.PerPeer {
		return nil, fmt.Errorf("peer nonce guard: reserve %d above the per-peer quota %d", lim.Reserve, lim.PerPeer)
	}
	return &PeerNonceGuard{lim: lim, seen: map[peerNonce]struct{}{}, perPeer: map[string]int{}}, nil
}

// Admit records peer's nonce until expires, after dropping every nonce
// whose expiry is at or before now. It returns ErrReplay if the peer's
// nonce is held; ErrPeerNonceQuota if the peer holds PerPeer nonces;
// ErrNonceGuardFull if the nonce would come from the pool and the pool is
// taken, or the peer holds none and Peers peers hold some. A refused
// nonce is not recorded.
func (g *PeerNonceGuard) Admit(peer, nonce string, expires, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruneLocked(now.UnixMilli())
	key := peerNonce{peer, nonce}
	if _, ok := g.seen[key]; ok {
		return ErrReplay
	}
	n := g.perPeer[peer]
	switch {
	case n >= g.lim.PerPeer:
		return ErrPeerNonceQuota
	case n >= g.lim.Reserve && g.shared >= g.lim.Shared:
		return ErrNonceGuardFull
	case n == 0 && len(g.perPeer) >= g.lim.Peers:
		return ErrNonceGuardFull
	}
	if n >= g.lim.Reserve {
		g.shared++
	}
	g.perPeer[peer] = n + 1
	g.seen[key] = struct{}{}
	heap.Push(&g.expiry, nonceExpiry{key: key, ms: expires.UnixMilli()})
	return nil
}

// pruneLocked drops the nonces whose expiry is at or before nowMS.
// Called with mu held.
func (g *PeerNonceGuard) pruneLocked(nowMS int64) {
	for len(g.expiry) > 0 && g.expiry[0].ms <= nowMS {
		e := heap.Pop(&g.expiry).(nonceExpiry)
		delete(g.seen, e.key)
		n := g.perPeer[e.key.peer]
		if n > g.lim.Reserve {
			g.shared--
		}
		if n <= 1 {
			delete(g.perPeer, e.key.peer)
		} else {
			g.perPeer[e.key.peer] = n - 1
		}
	}
}

// Len returns the number of nonces held, and how many of them peer holds.
func (g *PeerNonceGuard) Len(peer string) (total, ofPeer int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen), g.perPeer[peer]
}
