package ctl

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestPeerNonceGuard(t *testing.T) {
	g, err := NewPeerNonceGuard(PeerNonceLimits{PerPeer: 3, Shared: 2, Reserve: 1, Peers: 3})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	type step struct {
		peer, nonce string
		ttl         time.Duration
		want        error
	}
	run := func(steps []step) {
		t.Helper()
		for _, s := range steps {
			if err := g.Admit(s.peer, s.nonce, now.Add(s.ttl), now); !errors.Is(err, s.want) {
				t.Fatalf("at %v, admit %s/%s = %v, want %v", now.Sub(t0), s.peer, s.nonce, err, s.want)
			}
		}
	}
	run([]step{
		{"a", "1", time.Second, nil},       // a's reserve
		{"a", "1", time.Minute, ErrReplay}, // the same nonce of the same peer
		{"b", "1", time.Minute, nil},       // another peer's nonce may be equal
		{"a", "2", time.Minute, nil},       // from the pool (1 of 2)
		{"a", "3", time.Minute, nil},       // from the pool (2 of 2)
		{"a", "4", time.Minute, ErrPeerNonceQuota},
		{"b", "2", time.Minute, ErrNonceGuardFull}, // the pool is taken: b has only its reserve
		{"c", "1", time.Minute, nil},               // c's reserve
		{"d", "1", time.Minute, ErrNonceGuardFull}, // three peers hold nonces
	})
	if total, a := g.Len("a"); total != 5 || a != 3 {
		t.Fatalf("Len = %d, %d; want 5 in all, 3 of a", total, a)
	}
	// At a/1's expiry exactly it is dropped by the next Admit: a keeps
	// two pool nonces, one now counted as its reserve, so the pool has
	// room for b.
	now = now.Add(time.Second)
	run([]step{
		{"b", "2", time.Minute, nil},
		{"a", "4", time.Minute, ErrNonceGuardFull}, // 2 held, below its quota, but the pool is taken again
	})
	if total, a := g.Len("a"); total != 5 || a != 2 {
		t.Fatalf("Len = %d, %d; want 5 in all, 2 of a", total, a)
	}
	// Everything expires: the guard forgets every peer.
	now = now.Add(time.Minute)
	run([]step{{"d", "1", time.Minute, nil}, {"a", "1", time.Minute, nil}})
	if total, _ := g.Len("a"); total != 2 || len(g.perPeer) != 2 || g.shared != 0 {
		t.Fatalf("after expiry: %d nonces, %d peers, %d from the pool; want 2, 2, 0", total, len(g.perPeer), g.shared)
	}
}

func TestPeerNonceGuardAtQuotaErrorWithAnotherLimit(t *testing.T) {
	g, err := NewPeerNonceGuard(PeerNonceLimits{PerPeer: 2, Shared: 1, Reserve: 1})
	if err != nil {
		t.Fatal(err)
	}
	// ErrPeerNonceQuota is checked first: it says the peer's own doing.
	for i, want := range []error{nil, nil, ErrPeerNonceQuota} {
		if err := g.Admit("a", fmt.Sprint(i), t0.Add(time.Minute), t0); !errors.Is(err, want) {
			t.Fatalf("admit %d = %v, want %v", i, err, want)
		}
	}
}

// TestPeerNonceGuardInvariants drives random admissions of many peers over
// time: no peer ever holds more than its quota, the guard never more than
// Shared + Reserve*Peers, a live nonce is never admitted twice, every
// expired one is dropped, and the pool count matches the peers' counts.
func TestPeerNonceGuardInvariants(t *testing.T) {
	lim := PeerNonceLimits{PerPeer: 20, Shared: 50, Reserve: 4, Peers: 12}
	g, err := NewPeerNonceGuard(lim)
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(7)
	rnd := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int(seed>>33) % n
	}
	now := t0
	live := map[peerNonce]time.Time{} // what the guard must hold
	for i := range 50_000 {
		now = now.Add(time.Duration(rnd(50)) * time.Millisecond)
		for k, exp := range live {
			if !exp.After(now) {
				delete(live, k)
			}
		}
		peer := fmt.Sprint("p", rnd(16))
		if rnd(8) == 0 {
			peer = "flooder"
		}
		nonce := fmt.Sprint(rnd(400))
		exp := now.Add(time.Duration(1+rnd(60)) * time.Second)
		err := g.Admit(peer, nonce, exp, now)
		key := peerNonce{peer, nonce}
		if _, held := live[key]; held != errors.Is(err, ErrReplay) {
			t.Fatalf("step %d: admit of %v = %v, held %v", i, key, err, held)
		}
		if err == nil {
			live[key] = exp
		}
		if len(g.seen) != len(live) || len(g.expiry) != len(live) {
			t.Fatalf("step %d: guard holds %d (heap %d), want %d live", i, len(g.seen), len(g.expiry), len(live))
		}
		shared := 0
		for p, n := range g.perPeer {
			if n > lim.PerPeer || n < 1 {
				t.Fatalf("step %d: %s holds %d", i, p, n)
			}
			shared += max(0, n-lim.Reserve)
		}
		if shared != g.shared || shared > lim.Shared || len(g.perPeer) > lim.Peers {
			t.Fatalf("step %d: pool %d (counted %d), %d peers", i, shared, g.shared, len(g.perPeer))
		}
	}
}

func TestNewPeerNonceGuardRejects(t *testing.T) {
	for _, lim := range []PeerNonceLimits{{PerPeer: -1}, {Shared: -1}, {Reserve: -1}, {Peers: -1}, {PerPeer: 2, Reserve: 3}} {
		if _, err := NewPeerNonceGuard(lim); err == nil {
			t.Errorf("NewPeerNonceGuard(%+v) accepted", lim)
		}
	}
	g, err := NewPeerNonceGuard(PeerNonceLimits{PerPeer: 2})
	if err != nil || g.lim != (PeerNonceLimits{PerPeer: 2, Shared: MaxNonces, Reserve: 2, Peers: MaxNoncePeers}) {
		t.Errorf("defaults with a small quota: %+v, %v", g.lim, err)
	}
}
