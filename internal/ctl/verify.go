package ctl

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/identity"
)

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Self is this node's public key; requests must target its node id.
	Self ed25519.PublicKey
	// Controllers are the keys that may call every method.
	Controllers []ed25519.PublicKey
	// ReadOnly reports whether a key that is not a controller may call
	// one of the read-only methods (describe, status, logs): the host
	// admits every admitted peer to describe and only its readers to
	// status and logs. Nil admits nobody beyond the controllers.
	ReadOnly func(ed25519.PublicKey, Method) bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// NonceCapacity bounds the controllers' nonce guard and the pool the
	// peers' guard shares; 0 means MaxNonces.
	NonceCapacity int
	// PeerNonces bounds the peers' nonce guard beyond its pool (Shared is
	// NonceCapacity); zero fields take the defaults.
	PeerNonces PeerNonceLimits
}

// Verifier checks signed requests on a target node (reference section
// 2.7, plus the QUIC peer binding). It is safe for concurrent use.
type Verifier struct {
	selfID   string
	readOnly func(ed25519.PublicKey, Method) bool
	now      func() time.Time

	// Controllers and read-only peers have separate nonce guards, so that
	// a flood of read-only calls from admitted peers cannot fill the
	// guard and lock the controllers out; the peers' guard has a quota
	// per peer, so that one peer cannot lock the others out.
	controllerNonces *NonceGuard
	peerNonces       *PeerNonceGuard

	// mu guards controllers.
	mu sync.RWMutex
	// controllers holds the controller keys as strings of raw bytes.
	controllers map[string]struct{}
}

// NewVerifier validates cfg and returns a Verifier.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	if len(cfg.Self) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("verifier: self key of %d bytes", len(cfg.Self))
	}
	if cfg.NonceCapacity < 0 {
		return nil, fmt.Errorf("verifier: negative nonce capacity %d", cfg.NonceCapacity)
	}
	lim := cfg.PeerNonces
	lim.Shared = cfg.NonceCapacity
	peerNonces, err := NewPeerNonceGuard(lim)
	if err != nil {
		return nil, fmt.Errorf("verifier: %w", err)
	}
	v := &Verifier{
		selfID:           identity.NodeID(cfg.Self),
		readOnly:         cfg.ReadOnly,
		now:              cfg.Now,
		controllerNonces: NewNonceGuard(cfg.NonceCapacity),
		peerNonces:       peerNonces,
	}
	if v.now == nil {
		v.now = time.Now
	}
	if err := v.SetControllers(cfg.Controllers); err != nil {
		return nil, err
	}
	return v, nil
}

// SetControllers replaces the controller keys (config reload).
func (v *Verifier) SetControllers(keys []ed25519.PublicKey) error {
	m := make(map[string]struct{}, len(keys))
	for i, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("verifier: controller key %d has %d bytes", i, len(k))
		}
		m[string(k)] = struct{}{}
	}
	v.mu.Lock()
	v.controllers = m
	v.mu.Unlock()
	return nil
}

// SelfID returns the node id requests must target.
func (v *Verifier) SelfID() string { return v.selfID }

func (v *Verifier) isController(pub ed25519.PublicKey) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	_, ok := v.controllers[string(pub)]
	return ok
}

// VerifyRequest checks a request's wire bytes as received on a stream
// whose QUIC peer authenticated with peerKey. The checks run in this
// order, and the first failing one names the refusal:
//
//  1. envelope form, payload bound, ed25519 signature: signature
//  2. payload parses strictly as a Request: signature
//  3. version, and the term it implies (Version without a term,
//     VersionTerm with one): invalid_request
//  4. requester is the signing key's node id: signature
//  5. the signing key is peerKey: peer_mismatch
//  6. target is this node, or * with describe: not_for_me
//  7. expires > now, issued <= now+MaxSkew, 0 <= lifetime <= MaxLifetime: expired
//  8. nonce form: invalid_request
//  9. the key may call this method: unauthorized; a peer that is not a
//     controller only a read-only method, with a lifetime of at most
//     MaxReadOnlyLifetime: expired
//  10. nonce guard: replay (also when full of live nonces, or a peer
//     that is not a controller holds its quota of them)
//
// The nonce is burned only by step 10, so a request refused for any other
// reason never consumes a nonce. The method name itself and the decision
// id are checked after verification (see Serve), as the reference does.
func (v *Verifier) VerifyRequest(wire []byte, peerKey ed25519.PublicKey) (Request, *Refusal) {
	payload, pub, err := open(wire, RequestDomain, MaxRequestPayloadBytes)
	if err != nil {
		return Request{}, NewRefusal(CodeSignature, err.Error())
	}
	var req Request
	if err := decodeStrict(payload, &req); err != nil {
		return Request{}, NewRefusal(CodeSignature, "malformed request")
	}
	if r := checkVersion(req); r != nil {
		return Request{}, r
	}
	if req.Requester != identity.NodeID(pub) {
		return Request{}, NewRefusal(CodeSignature, "requester is not the signing key")
	}
	if !bytes.Equal(pub, peerKey) {
		return Request{}, NewRefusal(CodePeerMismatch, "request signed by a key other than the stream's peer")
	}
	if req.Target != v.selfID && (req.Target != WildcardTarget || req.Method != MethodDescribe) {
		return Request{}, NewRefusal(CodeNotForMe, "request targets another node")
	}
	now := v.now()
	if r := checkTimes(req, now); r != nil {
		return Request{}, r
	}
	if !ValidNonce(req.Nonce) {
		return Request{}, NewRefusal(CodeInvalidRequest, "nonce is not 32 lower-case hex")
	}
	switch {
	case v.isController(pub):
		err = v.controllerNonces.Admit(req.Requester+"/"+req.Nonce, req.ExpiresAt(), now)
	case !IsMutating(req.Method) && v.readOnly != nil && v.readOnly(pub, req.Method):
		if req.ExpiresAtMS-req.IssuedAtMS > MaxReadOnlyLifetime.Milliseconds() {
			return Request{}, NewRefusal(CodeExpired, fmt.Sprintf("read-only request lifetime exceeds %s", MaxReadOnlyLifetime))
		}
		err = v.peerNonces.Admit(req.Requester, req.Nonce, req.ExpiresAt(), now)
	default:
		return Request{}, NewRefusal(CodeUnauthorized, "key may not call this method")
	}
	if err != nil {
		return Request{}, NewRefusal(CodeReplay, err.Error())
	}
	return req, nil
}

// checkVersion is step 3 of VerifyRequest: a term travels only in a
// VersionTerm request, and a VersionTerm request always carries one, so
// that no request means two things to two versions of the host.
func checkVersion(req Request) *Refusal {
	switch {
	case req.Version == Version && req.Term != 0:
		return NewRefusal(CodeInvalidRequest, fmt.Sprintf("a term travels in version %d only", VersionTerm))
	case req.Version == VersionTerm && req.Term == 0:
		return NewRefusal(CodeInvalidRequest, fmt.Sprintf("version %d carries a term", VersionTerm))
	case req.Version != Version && req.Version != VersionTerm:
		return NewRefusal(CodeInvalidRequest, fmt.Sprintf("unsupported version %d", req.Version))
	}
	return nil
}

// checkTimes is step 7 of VerifyRequest.
func checkTimes(req Request, now time.Time) *Refusal {
	nowMS := now.UnixMilli()
	switch {
	case req.ExpiresAtMS <= nowMS:
		return NewRefusal(CodeExpired, "request expired")
	case req.IssuedAtMS > nowMS+MaxSkew.Milliseconds():
		return NewRefusal(CodeExpired, "request issued in the future")
	case req.ExpiresAtMS < req.IssuedAtMS:
		return NewRefusal(CodeExpired, "request expires before it was issued")
	case uint64(req.ExpiresAtMS-req.IssuedAtMS) > uint64(MaxLifetime.Milliseconds()):
		return NewRefusal(CodeExpired, "request lifetime exceeds the bound")
	}
	return nil
}

// ResponseError is returned by VerifyResponse: a response that is not a
// valid signed answer to the request. Code is the reference's code for the
// failure (signature, replay, not_for_me).
type ResponseError struct {
	Code   Code
	Reason string
}

// Error renders the failure.
func (e *ResponseError) Error() string {
	return fmt.Sprintf("invalid response (%s): %s", e.Code, e.Reason)
}

// VerifyResponse checks a response's wire bytes against the request it
// answers (reference section 2.8). expectedKey, when non-nil, is the key
// the responder must sign with. It returns the response and the key that
// signed it; with target * and no expected key that key is the
// responder's identity (trust on first use, the caller's decision). The
// checks, in order: envelope and signature (signature); expected key
// (signature); strict parse (signature); responder is the signing key's
// node id (signature); version and outcome form (signature); nonce and
// method answer req (replay); responder is req's target unless * (not_for_me).
func VerifyResponse(wire []byte, req Request, expectedKey ed25519.PublicKey) (Response, ed25519.PublicKey, error) {
	fail := func(code Code, reason string) (Response, ed25519.PublicKey, error) {
		return Response{}, nil, &ResponseError{Code: code, Reason: reason}
	}
	payload, pub, err := open(wire, ResponseDomain, MaxResponsePayloadBytes)
	if err != nil {
		return fail(CodeSignature, err.Error())
	}
	if expectedKey != nil && !bytes.Equal(pub, expectedKey) {
		return fail(CodeSignature, "response signed by another key")
	}
	var resp Response
	if err := decodeStrict(payload, &resp); err != nil {
		return fail(CodeSignature, "malformed response")
	}
	if resp.Responder != identity.NodeID(pub) {
		return fail(CodeSignature, "responder is not the signing key")
	}
	if resp.Version != Version {
		return fail(CodeSignature, fmt.Sprintf("unsupported version %d", resp.Version))
	}
	switch resp.Outcome {
	case OutcomeOK:
		if resp.Refusal != nil {
			return fail(CodeSignature, "ok response carries a refusal")
		}
	case OutcomeRefused:
		if resp.Refusal == nil || resp.Result != nil {
			return fail(CodeSignature, "refused response without a refusal alone")
		}
	default:
		return fail(CodeSignature, "unknown outcome")
	}
	if resp.RequestNonce != req.Nonce || resp.Method != req.Method {
		return fail(CodeReplay, "response answers another request")
	}
	if req.Target != WildcardTarget && resp.Responder != req.Target {
		return fail(CodeNotForMe, "response from a node other than the target")
	}
	return resp, pub, nil
}
