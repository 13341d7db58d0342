package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"testing"
)

// A term travels inside the signed bytes, in a version 2 request only; a
// version 2 request always carries one.
func TestVerifyRequestTermAndVersion(t *testing.T) {
	tests := []struct {
		name    string
		version int
		term    uint64
		want    Code
	}{
		{"version 1 without a term", Version, 0, ""},
		{"version 2 with a term", VersionTerm, 7, ""},
		{"version 2 with the largest term", VersionTerm, ^uint64(0), ""},
		{"version 1 with a term", Version, 7, CodeInvalidRequest},
		{"version 2 without a term", VersionTerm, 0, CodeInvalidRequest},
		{"version 3 with a term", 3, 7, CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			r := e.request(MethodPlace)
			r.Version, r.Term = tt.version, tt.term
			got, refusal := e.v.VerifyRequest(signRaw(t, controllerKey, r), pubOf(controllerKey))
			if refusalCode(refusal) != tt.want {
				t.Fatalf("refusal %v, want code %q", refusal, tt.want)
			}
			if refusal == nil && got.Term != tt.term {
				t.Fatalf("term %d, want %d", got.Term, tt.term)
			}
		})
	}
}

// The term is covered by the signature: a term raised after signing does
// not verify.
func TestTermEditedAfterSigningRefused(t *testing.T) {
	e := newTestEnv(t, nil)
	r := e.request(MethodPlace)
	r.Version, r.Term = VersionTerm, 3
	w := signRaw(t, controllerKey, r)
	w = reenvelope(t, w, func(en *envelope) {
		en.Payload = bytes.Replace(en.Payload, []byte(`"term":3`), []byte(`"term":9`), 1)
	})
	if _, refusal := e.v.VerifyRequest(w, pubOf(controllerKey)); refusalCode(refusal) != CodeSignature {
		t.Fatalf("refusal %v, want signature", refusal)
	}
}

// SignRequest sends a call without a term exactly as before terms (no
// term field, version 1), so an older host accepts it; a call with one is
// version 2, which an older host refuses as an unsupported version.
func TestSignRequestVersionFollowsTerm(t *testing.T) {
	e := newTestEnv(t, nil)
	for _, tt := range []struct {
		term        uint64
		wantVersion int
		wantTerm    bool
	}{{0, Version, false}, {5, VersionTerm, true}} {
		r := e.request(MethodStatus)
		r.Term = tt.term
		wire, err := SignRequest(controllerKey, r)
		if err != nil {
			t.Fatal(err)
		}
		env, err := decodeEnvelope(wire, MaxRequestPayloadBytes)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(env.Payload, &fields); err != nil {
			t.Fatal(err)
		}
		_, hasTerm := fields["term"]
		if string(fields["version"]) != fmt.Sprint(tt.wantVersion) || hasTerm != tt.wantTerm {
			t.Errorf("term %d: payload %s, want version %d and a term field %v", tt.term, env.Payload, tt.wantVersion, tt.wantTerm)
		}
		// An older host decodes strictly onto a request without Term, and
		// accepts only Version.
		var old struct {
			Version     int             `json:"version"`
			Method      Method          `json:"method"`
			Requester   string          `json:"requester"`
			Target      string          `json:"target"`
			Nonce       string          `json:"nonce"`
			IssuedAtMS  int64           `json:"issued_at_ms"`
			ExpiresAtMS int64           `json:"expires_at_ms"`
			DecisionID  string          `json:"decision_id,omitempty"`
			Body        json.RawMessage `json:"body"`
		}
		oldAccepts := decodeStrict(env.Payload, &old) == nil && old.Version == Version
		if oldAccepts != (tt.term == 0) {
			t.Errorf("term %d: an older host accepts it: %v", tt.term, oldAccepts)
		}
	}
}

// CallTerm carries the term to the handler, and a stale_term refusal
// comes back as a ClassRefused *CallError that matches ErrStaleTerm (and
// no other refusal does).
func TestClientCallTermAndStaleTerm(t *testing.T) {
	const seen = 4
	e := newTestEnv(t, func(ctx context.Context, req Request) (any, *Refusal) {
		if req.Term < seen {
			return nil, NewRefusal(CodeStaleTerm, "term below the host's")
		}
		if req.Method == MethodStart {
			return nil, NewRefusal(CodeUnknownInstance, "no such instance")
		}
		return map[string]uint64{"term": req.Term}, nil
	})
	self := Target{ID: idOf(selfKey), Key: pubOf(selfKey)}
	client := newTestClient(t, e.clock)
	call := func(method Method, term uint64) (*Answer, error) {
		open, wait := pipeOpener(func(st net.Conn) { _, _ = e.srv.Serve(context.Background(), st, pubOf(controllerKey)) })
		defer wait()
		return client.CallTerm(context.Background(), open, self, method, nil, decisionFor(method), term)
	}
	ans, err := call(MethodPlace, seen)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Request.Term != seen || ans.Request.Version != VersionTerm || string(ans.Response.Result) != `{"term":4}` {
		t.Fatalf("answer %+v", ans)
	}
	_, err = call(MethodPlace, seen-1)
	var ce *CallError
	if !errors.As(err, &ce) || ce.Class != ClassRefused || refusalCode(ce.Refusal) != CodeStaleTerm || !errors.Is(err, ErrStaleTerm) {
		t.Fatalf("err = %v, want a refused stale_term matching ErrStaleTerm", err)
	}
	_, err = call(MethodStart, seen)
	if !errors.As(err, &ce) || ce.Class != ClassRefused || errors.Is(err, ErrStaleTerm) {
		t.Fatalf("err = %v, want a refusal that is not ErrStaleTerm", err)
	}
}
