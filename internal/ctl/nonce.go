package ctl

import (
	"errors"
	"sync"
	"time"
)

var (
	// ErrReplay is returned by NonceGuard.Admit for a nonce it holds.
	ErrReplay = errors.New("nonce already used")
	// ErrNonceGuardFull is returned by NonceGuard.Admit when every entry
	// is a live nonce: the guard fails closed rather than forget one.
	ErrNonceGuardFull = errors.New("nonce guard is full of live nonces")
)

// NonceGuard remembers admitted nonces until their request expires. A
// request is refused once it expires (Verifier step 6, before the guard),
// so forgetting an expired nonce can never admit a replay. It is safe for
// concurrent use.
type NonceGuard struct {
	capacity int

	// mu guards seen.
	mu sync.Mutex
	// seen maps a nonce to its request's expiry in Unix milliseconds.
	seen map[string]int64
}

// NewNonceGuard returns an empty guard holding at most capacity nonces; a
// capacity below 1 means MaxNonces.
func NewNonceGuard(capacity int) *NonceGuard {
	if capacity < 1 {
		capacity = MaxNonces
	}
	return &NonceGuard{capacity: capacity, seen: make(map[string]int64)}
}

// Admit records nonce until expires, or returns ErrReplay if it is held,
// or ErrNonceGuardFull if the guard holds capacity nonces none of which
// has expired at now. Entries whose expiry is at or before now are dropped
// only when the guard is full.
func (g *NonceGuard) Admit(nonce string, expires, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if exp, ok := g.seen[nonce]; ok && exp > now.UnixMilli() {
		return ErrReplay
	}
	if len(g.seen) >= g.capacity {
		nowMS := now.UnixMilli()
		for n, exp := range g.seen {
			if exp <= nowMS {
				delete(g.seen, n)
			}
		}
		if len(g.seen) >= g.capacity {
			return ErrNonceGuardFull
		}
	}
	g.seen[nonce] = expires.UnixMilli()
	return nil
}

// Len returns the number of nonces held, expired ones included until they
// are pruned.
func (g *NonceGuard) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}
