package ctl

import (
	"crypto/ed25519"
	"errors"
	"time"
)

// Seal signs payload under domain with key and returns the wire bytes of
// a signed envelope, the form workload.ctl messages use. It is for other
// signed calls over the mesh (the demand call): each names its own
// domain, so that none of its signatures can pass for a workload.ctl
// message or for another call's.
func Seal(key ed25519.PrivateKey, domain string, payload []byte) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if domain == RequestDomain || domain == ResponseDomain {
		return nil, errors.New("seal: domain belongs to workload.ctl")
	}
	return seal(key, domain, payload), nil
}

// Open checks a signed envelope's form, the payload bound and its
// signature under domain, as the workload.ctl verifier does first, and
// returns the verified payload bytes and the signing key. The payload is
// still untrusted in content: the caller decodes it strictly (DecodeStrict)
// and checks who signed it.
func Open(wire []byte, domain string, maxPayload int) ([]byte, ed25519.PublicKey, error) {
	if domain == RequestDomain || domain == ResponseDomain {
		return nil, nil, errors.New("open: domain belongs to workload.ctl")
	}
	return open(wire, domain, maxPayload)
}

// DecodeStrict decodes one JSON object from data onto v, refusing unknown
// fields and anything after the object, as workload.ctl payloads are
// decoded.
func DecodeStrict(data []byte, v any) error { return decodeStrict(data, v) }

// CheckLifetime checks a call's issue and expiry times (Unix
// milliseconds) at now: not expired, not issued more than MaxSkew in the
// future, not expiring before it was issued, and living at most
// maxLifetime. It returns a CodeExpired refusal, or nil.
func CheckLifetime(issuedAtMS, expiresAtMS int64, now time.Time, maxLifetime time.Duration) *Refusal {
	if r := checkTimes(Request{IssuedAtMS: issuedAtMS, ExpiresAtMS: expiresAtMS}, now); r != nil {
		return r
	}
	if uint64(expiresAtMS-issuedAtMS) > uint64(maxLifetime.Milliseconds()) {
		return NewRefusal(CodeExpired, "request lifetime exceeds the bound")
	}
	return nil
}
