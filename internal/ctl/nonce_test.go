package ctl

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestNonceGuard(t *testing.T) {
	g := NewNonceGuard(3)
	now := t0
	admit := func(n string, ttl time.Duration) error { return g.Admit(n, now.Add(ttl), now) }
	for i, ttl := range []time.Duration{time.Second, time.Minute, time.Minute} {
		if err := admit(fmt.Sprint("n", i), ttl); err != nil {
			t.Fatalf("admit n%d: %v", i, err)
		}
	}
	if err := admit("n1", time.Minute); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay: got %v, want ErrReplay", err)
	}
	if err := admit("n3", time.Minute); !errors.Is(err, ErrNonceGuardFull) {
		t.Fatalf("full of live nonces: got %v, want ErrNonceGuardFull", err)
	}
	// At n0's expiry exactly it is dead and makes room.
	now = now.Add(time.Second)
	if err := admit("n3", time.Minute); err != nil {
		t.Fatalf("after n0 expired: %v", err)
	}
	if got := g.Len(); got != 3 {
		t.Fatalf("Len = %d, want 3", got)
	}
	if err := admit("n4", time.Minute); !errors.Is(err, ErrNonceGuardFull) {
		t.Fatalf("full again: got %v, want ErrNonceGuardFull", err)
	}
	// A failed admission records nothing.
	now = now.Add(time.Minute)
	for _, n := range []string{"n4", "n5", "n6"} {
		if err := admit(n, time.Minute); err != nil {
			t.Fatalf("admit %s after everything expired: %v", n, err)
		}
	}
}

func TestNonceGuardDefaultCapacity(t *testing.T) {
	g := NewNonceGuard(0)
	for i := range MaxNonces {
		if err := g.Admit(fmt.Sprint(i), t0.Add(time.Minute), t0); err != nil {
			t.Fatalf("admit %d: %v", i, err)
		}
	}
	if err := g.Admit("one more", t0.Add(time.Minute), t0); !errors.Is(err, ErrNonceGuardFull) {
		t.Fatalf("got %v, want ErrNonceGuardFull at %d", err, MaxNonces)
	}
}

// The verifier fails closed with replay when its guard is full, and a
// flood from read-only peers does not lock the controllers out.
func TestVerifierNonceGuardFull(t *testing.T) {
	clock := newFakeClock()
	v, err := NewVerifier(VerifierConfig{
		Self:          pubOf(selfKey),
		Controllers:   []ed25519.PublicKey{pubOf(controllerKey)},
		ReadOnly:      func(ed25519.PublicKey, Method) bool { return true },
		Now:           clock.Now,
		NonceCapacity: 2,
		PeerNonces:    PeerNonceLimits{PerPeer: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{clock: clock, v: v}
	send := func(key ed25519.PrivateKey, m Method) *Refusal {
		r := e.request(m)
		r.Requester = idOf(key)
		_, ref := v.VerifyRequest(signRaw(t, key, r), pubOf(key))
		return ref
	}
	for range 2 {
		if ref := send(peerKey, MethodStatus); ref != nil {
			t.Fatal(ref)
		}
	}
	if ref := send(peerKey, MethodStatus); refusalCode(ref) != CodeReplay {
		t.Fatalf("peer guard full: got %v, want replay", ref)
	}
	for range 2 {
		if ref := send(controllerKey, MethodPlace); ref != nil {
			t.Fatalf("controller while peers' guard is full: %v", ref)
		}
	}
	if ref := send(controllerKey, MethodPlace); refusalCode(ref) != CodeReplay {
		t.Fatalf("controller guard full: got %v, want replay", ref)
	}
	clock.Add(time.Minute) // every nonce expires
	if ref := send(controllerKey, MethodPlace); ref != nil {
		t.Fatalf("after expiry: %v", ref)
	}
}
