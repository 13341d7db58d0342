package ctl

import (
	"bytes"
	"crypto/ed25519"
	"testing"
	"time"
)

// TestPeerDescribeFlood: an admitted peer that is not a controller sends
// describe after describe, real signed requests from a Client, more than
// the whole guard holds (a guard of 1,024 rather than the daemon's 8,192
// keeps the test fast under -race; the quota is the daemon's). Past its
// quota it is refused (replay); another peer's describe, and a
// controller's, still pass. Once the flood's requests expire, the
// flooder is admitted again.
func TestPeerDescribeFlood(t *testing.T) {
	clock := newFakeClock()
	flooder, other := testKey(5), testKey(6)
	v, err := NewVerifier(VerifierConfig{
		Self:        pubOf(selfKey),
		Controllers: []ed25519.PublicKey{pubOf(controllerKey)},
		ReadOnly: func(k ed25519.PublicKey, _ Method) bool {
			return bytes.Equal(k, pubOf(flooder)) || bytes.Equal(k, pubOf(other))
		},
		Now:           clock.Now,
		NonceCapacity: 2 * MaxPeerNonces,
	})
	if err != nil {
		t.Fatal(err)
	}
	describe := func(key ed25519.PrivateKey) *Refusal {
		t.Helper()
		c, err := NewClient(ClientConfig{Key: key, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		_, wire, err := c.build(Target{ID: idOf(selfKey)}, MethodDescribe, nil, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		_, ref := v.VerifyRequest(wire, pubOf(key))
		return ref
	}

	const flood = 2*MaxPeerNonces + 100
	admitted := 0
	for i := range flood {
		switch ref := describe(flooder); {
		case ref == nil:
			admitted++
		case ref.Code != CodeReplay:
			t.Fatalf("describe %d of the flood refused %v, want replay", i, ref)
		}
		if i%64 == 0 {
			clock.Add(time.Millisecond) // the flood takes time, well within a lifetime
		}
	}
	if admitted != MaxPeerNonces {
		t.Errorf("the flooder had %d of %d describes admitted, want its quota of %d", admitted, flood, MaxPeerNonces)
	}
	if ref := describe(other); ref != nil {
		t.Fatalf("another peer's describe after the flood: refused %v", ref)
	}
	if ref := describe(controllerKey); ref != nil {
		t.Fatalf("a controller's describe after the flood: refused %v", ref)
	}
	clock.Add(ReadOnlyTTL)
	if ref := describe(flooder); ref != nil {
		t.Errorf("the flooder once its requests expired: refused %v", ref)
	}
}

// TestReadOnlyLifetime: a peer's read-only request may live at most
// MaxReadOnlyLifetime; a controller's, MaxLifetime. A Client gives read-only
// requests ReadOnlyTTL and mutations its TTL.
func TestReadOnlyLifetime(t *testing.T) {
	tests := []struct {
		name     string
		key      ed25519.PrivateKey
		method   Method
		lifetime time.Duration
		want     Code
	}{
		{"peer at the bound", peerKey, MethodStatus, MaxReadOnlyLifetime, ""},
		{"peer past the bound", peerKey, MethodDescribe, MaxReadOnlyLifetime + time.Millisecond, CodeExpired},
		{"peer logs for the old default", peerKey, MethodLogs, DefaultTTL, CodeExpired},
		{"controller describe for the old default", controllerKey, MethodDescribe, DefaultTTL, ""},
		{"controller place", controllerKey, MethodPlace, MaxLifetime, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			r := e.request(tt.method)
			r.Requester = idOf(tt.key)
			r.ExpiresAtMS = r.IssuedAtMS + tt.lifetime.Milliseconds()
			_, ref := e.v.VerifyRequest(signRaw(t, tt.key, r), pubOf(tt.key))
			if refusalCode(ref) != tt.want {
				t.Errorf("refusal %v, want %q", ref, tt.want)
			}
		})
	}

	clock := newFakeClock()
	c, err := NewClient(ClientConfig{Key: controllerKey, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Methods() {
		decision := ""
		if IsMutating(m) {
			decision = testDecision
		}
		req, _, err := c.build(Target{ID: idOf(selfKey)}, m, nil, decision, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := DefaultTTL
		if !IsMutating(m) {
			want = ReadOnlyTTL
		}
		if got := req.ExpiresAt().Sub(req.IssuedAt()); got != want {
			t.Errorf("%s: lifetime %v, want %v", m, got, want)
		}
	}
}
