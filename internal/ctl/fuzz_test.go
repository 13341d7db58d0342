package ctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nodeld/nodeld/internal/grammar"
)

// FuzzVerifyRequest feeds arbitrary envelope bytes to the verifier: it
// must never panic, and what it accepts must be a well-formed request
// that is a replay the second time.
func FuzzVerifyRequest(f *testing.F) {
	e := newTestEnv(f, nil)
	f.Add(signRaw(f, controllerKey, e.request(MethodPlace)))
	f.Add(signRaw(f, controllerKey, e.request(MethodDescribe)))
	termed := e.request(MethodStart)
	termed.Version, termed.Term = VersionTerm, 12
	f.Add(signRaw(f, controllerKey, termed))
	termed.Version = Version
	f.Add(signRaw(f, controllerKey, termed))
	f.Add([]byte(`{"payload":"e30=","public_key":"00","signature":"00"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, wire []byte) {
		req, refusal := e.v.VerifyRequest(wire, pubOf(controllerKey))
		if refusal != nil {
			if !refusal.Code.Known() || len(refusal.Reason) > MaxReasonBytes {
				t.Fatalf("bad refusal %+v", refusal)
			}
			return
		}
		if (req.Version == Version) != (req.Term == 0) || (req.Version == VersionTerm) != (req.Term != 0) ||
			!ValidNonce(req.Nonce) || req.Requester != idOf(controllerKey) {
			t.Fatalf("accepted %+v", req)
		}
		if _, r := e.v.VerifyRequest(wire, pubOf(controllerKey)); refusalCode(r) != CodeReplay {
			t.Fatalf("second time: %v", r)
		}
	})
}

// FuzzVerifyResponse feeds arbitrary bytes as a response: never a panic,
// and an accepted response is bound to its request.
func FuzzVerifyResponse(f *testing.F) {
	e := newTestEnv(f, nil)
	req := e.request(MethodPlace)
	ok, _ := SignResponse(selfKey, Response{Method: req.Method, RequestNonce: req.Nonce, Outcome: OutcomeOK, Result: json.RawMessage(`{}`)})
	no, _ := SignResponse(selfKey, Response{Method: req.Method, RequestNonce: req.Nonce, Outcome: OutcomeRefused, Refusal: NewRefusal(CodeRuntime, "x")})
	f.Add(ok)
	f.Add(no)
	f.Add([]byte(`{"payload":"","public_key":"","signature":""}`))
	f.Fuzz(func(t *testing.T, wire []byte) {
		resp, key, err := VerifyResponse(wire, req, pubOf(selfKey))
		if err != nil {
			return
		}
		if !key.Equal(pubOf(selfKey)) || resp.RequestNonce != req.Nonce || resp.Method != req.Method ||
			resp.Responder != req.Target || (resp.Outcome == OutcomeRefused) != (resp.Refusal != nil) {
			t.Fatalf("accepted unbound response %+v", resp)
		}
	})
}

// FuzzDecodeParams feeds arbitrary bodies to the parameter decoders and
// the frame reader.
func FuzzDecodeParams(f *testing.F) {
	place, _ := json.Marshal(validPlace())
	f.Add(uint8(0), place)
	f.Add(uint8(3), []byte(`{"instance_id":"a","grace_ms":100}`))
	f.Add(uint8(6), []byte(`{"include_departed":true}`))
	f.Add(uint8(9), []byte{2, 0, 0, 0, 1, 'x'})
	methods := Methods()
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		if p, err := DecodePlaceParams(body); err == nil {
			if len(p.Manifest) == 0 || len(p.Manifest) > MaxManifestBytes || !grammar.ValidName(p.Package) {
				t.Fatalf("accepted %+v", p)
			}
		}
		m := methods[int(which)%len(methods)]
		if p, err := DecodeInstanceParams(m, body); err == nil {
			if p.InstanceID == "" && m != MethodStatus || p.GraceMS < 0 || p.Grace() > MaxStopGrace {
				t.Fatalf("%s accepted %+v", m, p)
			}
		}
		if msg, err := ReadMessage(bytes.NewReader(body), 64); err == nil && len(msg) > 64 {
			t.Fatalf("message of %d bytes over the limit", len(msg))
		}
	})
}

// FuzzDecodeFetchRequest: the fetch frame comes from a peer. The decoder
// never panics, its errors wrap ErrArtifactMalformed, and what it accepts
// satisfies every check.
func FuzzDecodeFetchRequest(f *testing.F) {
	f.Add([]byte(`{"v":1,"decision_id":"` + testDecision + `","path":"bin/x","offset":5}`))
	f.Add([]byte(`{"v":1,"decision_id":"` + testDecision + `","path":"a","offset":-1}`))
	f.Add([]byte(`{"v":1} {}`))
	f.Add([]byte(`{"v":1,"x":2}`))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := DecodeFetchRequest(p)
		if err != nil {
			if !errors.Is(err, ErrArtifactMalformed) {
				t.Fatalf("error %v does not wrap ErrArtifactMalformed", err)
			}
			return
		}
		if r.V != ArtifactVersion || r.Path == "" || len(r.Path) > MaxArtifactPathBytes || r.Offset < 0 || len(r.DecisionID) != DecisionIDHexLen {
			t.Fatalf("accepted %+v", r)
		}
	})
}

func FuzzDecodeFetchHeader(f *testing.F) {
	f.Add([]byte(`{"size":10,"offset":4}`))
	f.Add([]byte(`{"size":-1,"offset":0}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := DecodeFetchHeader(p)
		if err == nil && (h.Size < 0 || h.Offset < 0 || h.Offset > h.Size) {
			t.Fatalf("accepted %+v", h)
		}
	})
}

func FuzzDecodeArtifactRefusal(f *testing.F) {
	f.Add([]byte(`{"code":"not_listed","message":"no"}`))
	f.Add([]byte(`{"code":"x","message":"\u00e9\u00e9"}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := DecodeArtifactRefusal(p)
		if err == nil && len(r.Message) > MaxArtifactMessageBytes {
			t.Fatalf("message of %d bytes kept", len(r.Message))
		}
	})
}

func FuzzSplitPiece(f *testing.F) {
	f.Add(make([]byte, 40))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, p []byte) {
		sum, data, err := SplitPiece(p)
		if err == nil && (len(sum) != PieceHashBytes || len(data) == 0 || len(data) > MaxPieceBytes) {
			t.Fatalf("split %d into %d+%d", len(p), len(sum), len(data))
		}
	})
}

// FuzzPeek: a refused request's method and nonce are read from bytes that
// failed verification, to name them in the signed refusal. peek never
// panics, echoes only a well-formed nonce and a short printable method, and
// what it echoes signs into a refusal.
func FuzzPeek(f *testing.F) {
	e := newTestEnv(f, nil)
	f.Add(signRaw(f, controllerKey, e.request(MethodPlace)))
	bad := e.request(MethodStop)
	bad.Method = "stop\x1b[2J"
	f.Add(signRaw(f, controllerKey, bad))
	f.Add([]byte(`{"payload":"eyJtZXRob2QiOiJ4Iiwibm9uY2UiOjF9","public_key":"00","signature":"00"}`))
	f.Add([]byte(`{"payload":"bnVsbA==","public_key":"","signature":""}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, wire []byte) {
		method, nonce := peek(wire)
		if nonce != "" && !ValidNonce(nonce) {
			t.Fatalf("echoed nonce %q", nonce)
		}
		if method != "" && !printableToken(string(method), MaxMethodBytes) {
			t.Fatalf("echoed method %q", method)
		}
		if _, err := SignResponse(selfKey, Response{Method: method, RequestNonce: nonce, Outcome: OutcomeRefused, Refusal: NewRefusal(CodeSignature, "x")}); err != nil {
			t.Fatalf("refusal naming %q, %q does not sign: %v", method, nonce, err)
		}
	})
}
