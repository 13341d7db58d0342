package ctl

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"testing"
)

func TestVerifyResponseBinding(t *testing.T) {
	e := newTestEnv(t, nil)
	req := e.request(MethodPlace)
	good := Response{Method: req.Method, RequestNonce: req.Nonce, Outcome: OutcomeOK, Result: json.RawMessage(`{"a":1}`)}
	sign := func(key ed25519.PrivateKey, r Response) []byte {
		w, err := SignResponse(key, r)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	raw := func(key ed25519.PrivateKey, domain string, v any) []byte {
		p, _ := json.Marshal(v)
		return seal(key, domain, p)
	}
	wildcard := req
	wildcard.Target = WildcardTarget
	tests := []struct {
		name     string
		wire     []byte
		req      Request
		expected ed25519.PublicKey
		want     Code
	}{
		{"ok", sign(selfKey, good), req, pubOf(selfKey), ""},
		{"ok without expected key", sign(selfKey, good), req, nil, ""},
		{"wildcard, any key", sign(peerKey, good), wildcard, nil, ""},
		{"wildcard, expected key differs", sign(peerKey, good), wildcard, pubOf(selfKey), CodeSignature},
		{"signed by another key", sign(peerKey, good), req, pubOf(selfKey), CodeSignature},
		{"another node, no expected key", sign(peerKey, good), req, nil, CodeNotForMe},
		{"other nonce", sign(selfKey, Response{Method: req.Method, RequestNonce: e.nonces.next(), Outcome: OutcomeOK}), req, pubOf(selfKey), CodeReplay},
		{"other method", sign(selfKey, Response{Method: MethodLoad, RequestNonce: req.Nonce, Outcome: OutcomeOK}), req, pubOf(selfKey), CodeReplay},
		{"signed in the request domain", raw(selfKey, RequestDomain, Response{Version: 1, Method: req.Method, Responder: idOf(selfKey), RequestNonce: req.Nonce, Outcome: OutcomeOK}), req, pubOf(selfKey), CodeSignature},
		{"responder is not the signer", raw(selfKey, ResponseDomain, Response{Version: 1, Method: req.Method, Responder: idOf(peerKey), RequestNonce: req.Nonce, Outcome: OutcomeOK}), req, nil, CodeSignature},
		{"version 2", raw(selfKey, ResponseDomain, Response{Version: 2, Method: req.Method, Responder: idOf(selfKey), RequestNonce: req.Nonce, Outcome: OutcomeOK}), req, nil, CodeSignature},
		{"unknown outcome", raw(selfKey, ResponseDomain, Response{Version: 1, Method: req.Method, Responder: idOf(selfKey), RequestNonce: req.Nonce, Outcome: "maybe"}), req, nil, CodeSignature},
		{"refused without refusal", raw(selfKey, ResponseDomain, Response{Version: 1, Method: req.Method, Responder: idOf(selfKey), RequestNonce: req.Nonce, Outcome: OutcomeRefused}), req, nil, CodeSignature},
		{"ok with refusal", raw(selfKey, ResponseDomain, Response{Version: 1, Method: req.Method, Responder: idOf(selfKey), RequestNonce: req.Nonce, Outcome: OutcomeOK, Refusal: &Refusal{Code: CodeRuntime}}), req, nil, CodeSignature},
		{"unknown field", seal(selfKey, ResponseDomain, []byte(`{"version":1,"method":"workload.place","responder":"`+idOf(selfKey)+`","request_nonce":"`+req.Nonce+`","outcome":"ok","x":1}`)), req, nil, CodeSignature},
		{"not json", []byte("nope"), req, nil, CodeSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := VerifyResponse(tt.wire, tt.req, tt.expected)
			var got Code
			var re *ResponseError
			if errors.As(err, &re) {
				got = re.Code
			} else if err != nil {
				t.Fatalf("error is not a *ResponseError: %v", err)
			}
			if got != tt.want {
				t.Fatalf("code = %q (%v), want %q", got, err, tt.want)
			}
		})
	}
}

func TestSignRejectsBadKey(t *testing.T) {
	if _, err := SignRequest(ed25519.PrivateKey{1}, Request{}); !errors.Is(err, ErrBadKey) {
		t.Fatalf("SignRequest: %v", err)
	}
	if _, err := SignResponse(nil, Response{}); !errors.Is(err, ErrBadKey) {
		t.Fatalf("SignResponse: %v", err)
	}
}

func TestRefusalReasonClipped(t *testing.T) {
	long := ""
	for len(long) < MaxReasonBytes+10 {
		long += "é"
	}
	r := NewRefusal(CodeRuntime, "x"+long)
	if len(r.Reason) > MaxReasonBytes || !json.Valid([]byte(`"`+r.Reason+`"`)) {
		t.Fatalf("reason of %d bytes", len(r.Reason))
	}
	if r.Reason[len(r.Reason)-2:] != "é" {
		t.Fatalf("reason cut inside a rune: %q", r.Reason[len(r.Reason)-4:])
	}
}
