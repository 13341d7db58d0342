package ctl

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// reenvelope rebuilds an envelope with edits to its fields.
func reenvelope(t *testing.T, wire []byte, edit func(*envelope)) []byte {
	t.Helper()
	var e envelope
	if err := json.Unmarshal(wire, &e); err != nil {
		t.Fatal(err)
	}
	edit(&e)
	out, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVerifyRequestRefusals(t *testing.T) {
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	tests := []struct {
		name string
		// make returns the wire bytes and the QUIC peer's key.
		make func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey)
		want Code
	}{
		{"valid place", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			return signRaw(t, controllerKey, e.request(MethodPlace)), pubOf(controllerKey)
		}, ""},
		{"not json", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			return []byte("hello"), pubOf(controllerKey)
		}, CodeSignature},
		{"unknown envelope field", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			w := signRaw(t, controllerKey, e.request(MethodPlace))
			return append(w[:len(w)-1], []byte(`,"x":1}`)...), pubOf(controllerKey)
		}, CodeSignature},
		{"upper-case key hex", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			w := signRaw(t, controllerKey, e.request(MethodPlace))
			return reenvelope(t, w, func(en *envelope) { en.PublicKey = strings.ToUpper(en.PublicKey) }), pubOf(controllerKey)
		}, CodeSignature},
		{"short signature", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			w := signRaw(t, controllerKey, e.request(MethodPlace))
			return reenvelope(t, w, func(en *envelope) { en.Signature = en.Signature[:126] }), pubOf(controllerKey)
		}, CodeSignature},
		{"payload edited after signing", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			w := signRaw(t, controllerKey, e.request(MethodPlace))
			return reenvelope(t, w, func(en *envelope) {
				en.Payload = bytes.Replace(en.Payload, []byte("workload.place"), []byte("workload.start"), 1)
			}), pubOf(controllerKey)
		}, CodeSignature},
		{"signed as a response", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			p, _ := json.Marshal(e.request(MethodPlace))
			return seal(controllerKey, ResponseDomain, p), pubOf(controllerKey)
		}, CodeSignature},
		{"payload too large", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Body = json.RawMessage(`"` + strings.Repeat("a", MaxRequestPayloadBytes) + `"`)
			p, _ := json.Marshal(r)
			return seal(controllerKey, RequestDomain, p), pubOf(controllerKey)
		}, CodeSignature},
		{"unknown request field", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			p, _ := json.Marshal(e.request(MethodPlace))
			p = append(p[:len(p)-1], []byte(`,"extra":true}`)...)
			return seal(controllerKey, RequestDomain, p), pubOf(controllerKey)
		}, CodeSignature},
		{"trailing data in payload", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			p, _ := json.Marshal(e.request(MethodPlace))
			return seal(controllerKey, RequestDomain, append(p, []byte(" {}")...)), pubOf(controllerKey)
		}, CodeSignature},
		{"version 2", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Version = 2
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeInvalidRequest},
		{"requester is not the signer", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Requester = idOf(strangerKey)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeSignature},
		{"signer is not the quic peer", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			return signRaw(t, controllerKey, e.request(MethodPlace)), pubOf(peerKey)
		}, CodePeerMismatch},
		{"another node's request", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Target = idOf(peerKey)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeNotForMe},
		{"wildcard place", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Target = WildcardTarget
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeNotForMe},
		{"wildcard describe", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodDescribe)
			r.Target = WildcardTarget
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, ""},
		{"expires now", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.IssuedAtMS, r.ExpiresAtMS = ms(-time.Minute), ms(0)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeExpired},
		{"expires in 1ms", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.IssuedAtMS, r.ExpiresAtMS = ms(-time.Minute), ms(time.Millisecond)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, ""},
		{"issued at the skew bound", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.IssuedAtMS, r.ExpiresAtMS = ms(MaxSkew), ms(MaxSkew+time.Minute)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, ""},
		{"issued past the skew bound", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.IssuedAtMS, r.ExpiresAtMS = ms(MaxSkew+time.Millisecond), ms(MaxSkew+time.Minute)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeExpired},
		{"lifetime at the bound", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.IssuedAtMS, r.ExpiresAtMS = ms(0), ms(MaxLifetime)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, ""},
		{"lifetime past the bound", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.IssuedAtMS, r.ExpiresAtMS = ms(0), ms(MaxLifetime+time.Millisecond)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeExpired},
		{"negative lifetime", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.IssuedAtMS, r.ExpiresAtMS = ms(20*time.Second), ms(10*time.Second)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeExpired},
		{"lifetime overflow", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.IssuedAtMS, r.ExpiresAtMS = -1<<63, ms(time.Minute)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeExpired},
		{"upper-case nonce", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Nonce = strings.Repeat("A", NonceHexLen)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeInvalidRequest},
		{"short nonce", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Nonce = "abcd"
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeInvalidRequest},
		{"stranger describes", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodDescribe)
			r.Requester = idOf(strangerKey)
			return signRaw(t, strangerKey, r), pubOf(strangerKey)
		}, CodeUnauthorized},
		{"peer places", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Requester = idOf(peerKey)
			return signRaw(t, peerKey, r), pubOf(peerKey)
		}, CodeUnauthorized},
		{"peer calls an unknown method", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request("workload.frobnicate")
			r.Requester = idOf(peerKey)
			return signRaw(t, peerKey, r), pubOf(peerKey)
		}, CodeUnauthorized},
		{"peer reads status", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodStatus)
			r.Requester = idOf(peerKey)
			return signRaw(t, peerKey, r), pubOf(peerKey)
		}, ""},
		// Order: the earlier check names the refusal.
		{"bad version and foreign requester", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Version, r.Requester = 2, idOf(strangerKey)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeInvalidRequest},
		{"peer mismatch and wrong target", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Target = idOf(peerKey)
			return signRaw(t, controllerKey, r), pubOf(strangerKey)
		}, CodePeerMismatch},
		{"wrong target and expired", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Target, r.ExpiresAtMS = idOf(peerKey), ms(0)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeNotForMe},
		{"expired and bad nonce", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Nonce, r.ExpiresAtMS = "x", ms(0)
			return signRaw(t, controllerKey, r), pubOf(controllerKey)
		}, CodeExpired},
		{"bad nonce and unauthorised", func(t *testing.T, e *testEnv) ([]byte, ed25519.PublicKey) {
			r := e.request(MethodPlace)
			r.Nonce, r.Requester = "x", idOf(strangerKey)
			return signRaw(t, strangerKey, r), pubOf(strangerKey)
		}, CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			wire, peer := tt.make(t, e)
			_, refusal := e.v.VerifyRequest(wire, peer)
			if got := refusalCode(refusal); got != tt.want {
				t.Fatalf("code = %q (%v), want %q", got, refusal, tt.want)
			}
			// The same bytes again: a request that passed is now a
			// replay; one that was refused is refused the same way, its
			// nonce unburned.
			want := tt.want
			if want == "" {
				want = CodeReplay
			}
			if _, refusal := e.v.VerifyRequest(wire, peer); refusalCode(refusal) != want {
				t.Fatalf("second time: code = %q (%v), want %q", refusalCode(refusal), refusal, want)
			}
		})
	}
}

func TestVerifyRequestReturnsRequest(t *testing.T) {
	e := newTestEnv(t, nil)
	want := e.request(MethodPlace)
	want.Body = json.RawMessage(`{"package":"x"}`)
	got, refusal := e.v.VerifyRequest(signRaw(t, controllerKey, want), pubOf(controllerKey))
	if refusal != nil {
		t.Fatal(refusal)
	}
	if got.Nonce != want.Nonce || got.Method != want.Method || got.DecisionID != want.DecisionID ||
		string(got.Body) != string(want.Body) || got.ExpiresAtMS != want.ExpiresAtMS {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestRefusedRequestKeepsNonce(t *testing.T) {
	t.Run("unauthorised then authorised", func(t *testing.T) {
		e := newTestEnv(t, nil)
		r := e.request(MethodPlace)
		r.Requester = idOf(strangerKey)
		wire := signRaw(t, strangerKey, r)
		if _, ref := e.v.VerifyRequest(wire, pubOf(strangerKey)); refusalCode(ref) != CodeUnauthorized {
			t.Fatalf("got %v, want unauthorized", ref)
		}
		if err := e.v.SetControllers([]ed25519.PublicKey{pubOf(strangerKey)}); err != nil {
			t.Fatal(err)
		}
		if _, ref := e.v.VerifyRequest(wire, pubOf(strangerKey)); ref != nil {
			t.Fatalf("authorised: %v", ref)
		}
	})
	t.Run("future then in skew", func(t *testing.T) {
		e := newTestEnv(t, nil)
		r := e.request(MethodPlace)
		r.IssuedAtMS = t0.Add(time.Minute).UnixMilli()
		r.ExpiresAtMS = t0.Add(2 * time.Minute).UnixMilli()
		wire := signRaw(t, controllerKey, r)
		if _, ref := e.v.VerifyRequest(wire, pubOf(controllerKey)); refusalCode(ref) != CodeExpired {
			t.Fatalf("got %v, want expired", ref)
		}
		e.clock.Add(40 * time.Second)
		if _, ref := e.v.VerifyRequest(wire, pubOf(controllerKey)); ref != nil {
			t.Fatalf("in skew: %v", ref)
		}
	})
	t.Run("replayed by another peer", func(t *testing.T) {
		e := newTestEnv(t, nil)
		wire := signRaw(t, controllerKey, e.request(MethodPlace))
		if _, ref := e.v.VerifyRequest(wire, pubOf(peerKey)); refusalCode(ref) != CodePeerMismatch {
			t.Fatalf("got %v, want peer_mismatch", ref)
		}
		if _, ref := e.v.VerifyRequest(wire, pubOf(controllerKey)); ref != nil {
			t.Fatalf("from its signer: %v", ref)
		}
	})
}

func TestReplayAfterExpiryIsExpired(t *testing.T) {
	e := newTestEnv(t, nil)
	wire := signRaw(t, controllerKey, e.request(MethodPlace))
	if _, ref := e.v.VerifyRequest(wire, pubOf(controllerKey)); ref != nil {
		t.Fatal(ref)
	}
	e.clock.Add(time.Minute)
	if _, ref := e.v.VerifyRequest(wire, pubOf(controllerKey)); refusalCode(ref) != CodeExpired {
		t.Fatalf("got %v, want expired (the earlier check)", ref)
	}
}

func TestNewVerifierRejects(t *testing.T) {
	tests := []struct {
		name string
		cfg  VerifierConfig
	}{
		{"no self", VerifierConfig{}},
		{"short controller key", VerifierConfig{Self: pubOf(selfKey), Controllers: []ed25519.PublicKey{{1, 2}}}},
		{"negative capacity", VerifierConfig{Self: pubOf(selfKey), NonceCapacity: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewVerifier(tt.cfg); err == nil {
				t.Fatal("NewVerifier accepted a bad config")
			}
		})
	}
}
