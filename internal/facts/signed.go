package facts

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nodeld/nodeld/internal/identity"
)

// DomainTag prefixes the payload in every facts signature, so a facts
// signature can never be replayed as any other nodeld signature.
const DomainTag = "nodeld.facts.v1\x00"

// Signed is signed facts as they travel: the exact payload bytes, the
// signer's public key and the signature, both in lower-case hex.
//
// Sign produces compact JSON with HTML characters escaped, which is the
// form encoding/json emits a json.RawMessage in, so a Signed survives
// being marshalled and unmarshalled again byte for byte.
type Signed struct {
	Payload   json.RawMessage `json:"payload"`
	PublicKey string          `json:"public_key"`
	Signature string          `json:"signature"`
}

// Meta is what the signed payload says about the facts in it.
type Meta struct {
	// Seq increases with every signing by the same node, across restarts.
	Seq uint64
	// IssuedAt is when the facts were signed (UTC).
	IssuedAt time.Time
	// TTL is how long after IssuedAt the facts hold.
	TTL time.Duration
	// ExpiresAt is IssuedAt+TTL.
	ExpiresAt time.Time
	// Expired is true when now is at or past ExpiresAt. Callers must not
	// use expired facts for placement.
	Expired bool
}

// Verification and signing errors; callers branch on them with errors.Is.
// Structural problems wrap ErrInvalidFacts.
var (
	// ErrMalformed: the envelope or payload cannot be decoded or is out
	// of bounds.
	ErrMalformed = errors.New("malformed signed facts")
	// ErrBadSignature: the signature does not verify under the key.
	ErrBadSignature = errors.New("facts signature does not verify")
	// ErrKeyMismatch: the facts are signed by another key than expected.
	ErrKeyMismatch = errors.New("facts signed by an unexpected key")
	// ErrNodeIDMismatch: the node id inside is not the signing key's id.
	ErrNodeIDMismatch = errors.New("facts node id does not match the signing key")
	// ErrFromFuture: issued_at is more than MaxFutureSkew ahead of now.
	ErrFromFuture = errors.New("facts issued in the future")
	// ErrInvalidTTL: the TTL is outside MinTTL..MaxTTL or not whole
	// seconds.
	ErrInvalidTTL = errors.New("invalid facts ttl")
)

// payload is the signed JSON object.
type payload struct {
	Facts      Facts  `json:"facts"`
	Seq        uint64 `json:"seq"`
	IssuedAt   string `json:"issued_at"`
	TTLSeconds int64  `json:"ttl_seconds"`
}

// Sign signs f with key. An empty f.NodeID is set to the key's node id; a
// different one is refused with ErrNodeIDMismatch. seq must be positive
// (take it from a SeqStore); ttl must be whole seconds within MinTTL and
// MaxTTL.
func Sign(key ed25519.PrivateKey, f Facts, seq uint64, now time.Time, ttl time.Duration) (Signed, error) {
	if len(key) != ed25519.PrivateKeySize {
		return Signed{}, fmt.Errorf("sign facts: private key has %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	if ttl < MinTTL || ttl > MaxTTL || ttl%time.Second != 0 {
		return Signed{}, fmt.Errorf("sign facts: %w: %s is not whole seconds within %s..%s", ErrInvalidTTL, ttl, MinTTL, MaxTTL)
	}
	if seq == 0 {
		return Signed{}, errors.New("sign facts: seq must be positive")
	}
	pub := key.Public().(ed25519.PublicKey)
	id := identity.NodeID(pub)
	switch f.NodeID {
	case "":
		f.NodeID = id
	case id:
	default:
		return Signed{}, fmt.Errorf("sign facts: %w: facts name %q, key is %q", ErrNodeIDMismatch, f.NodeID, id)
	}
	if err := f.Validate(); err != nil {
		return Signed{}, fmt.Errorf("sign facts: %w", err)
	}
	body, err := json.Marshal(payload{
		Facts:      f,
		Seq:        seq,
		IssuedAt:   now.UTC().Format(time.RFC3339Nano),
		TTLSeconds: int64(ttl / time.Second),
	})
	if err != nil {
		return Signed{}, fmt.Errorf("sign facts: encode payload: %w", err)
	}
	if len(body) > MaxPayloadBytes {
		return Signed{}, fmt.Errorf("sign facts: %w: payload of %d bytes exceeds %d", ErrMalformed, len(body), MaxPayloadBytes)
	}
	return Signed{
		Payload:   body,
		PublicKey: hex.EncodeToString(pub),
		Signature: hex.EncodeToString(ed25519.Sign(key, signedMessage(body))),
	}, nil
}

func signedMessage(body []byte) []byte {
	msg := make([]byte, 0, len(DomainTag)+len(body))
	msg = append(msg, DomainTag...)
	return append(msg, body...)
}

// Verify checks s and returns its facts. With a non-nil expectedKey the
// facts must be signed by exactly that key (ErrKeyMismatch); with nil any
// key is accepted. Either way the node id inside must be the signing key's
// id (ErrNodeIDMismatch). The signature is checked over the bytes as
// received before the payload is parsed. Facts issued more than
// MaxFutureSkew after now are refused (ErrFromFuture); expired facts are
// returned with Meta.Expired set, not refused, so a cache can tell "stale"
// from "forged".
func Verify(s Signed, expectedKey ed25519.PublicKey, now time.Time) (Facts, Meta, error) {
	if len(s.Payload) == 0 || len(s.Payload) > MaxPayloadBytes {
		return Facts{}, Meta{}, fmt.Errorf("%w: payload of %d bytes, want 1 to %d", ErrMalformed, len(s.Payload), MaxPayloadBytes)
	}
	if len(s.PublicKey) != 2*ed25519.PublicKeySize || len(s.Signature) != 2*ed25519.SignatureSize {
		return Facts{}, Meta{}, fmt.Errorf("%w: public key or signature has the wrong length", ErrMalformed)
	}
	pubBytes, err := hex.DecodeString(s.PublicKey)
	if err != nil {
		return Facts{}, Meta{}, fmt.Errorf("%w: public key: %v", ErrMalformed, err)
	}
	sig, err := hex.DecodeString(s.Signature)
	if err != nil {
		return Facts{}, Meta{}, fmt.Errorf("%w: signature: %v", ErrMalformed, err)
	}
	pub := ed25519.PublicKey(pubBytes)
	if expectedKey != nil && !bytes.Equal(expectedKey, pub) {
		return Facts{}, Meta{}, ErrKeyMismatch
	}
	if !ed25519.Verify(pub, signedMessage(s.Payload), sig) {
		return Facts{}, Meta{}, ErrBadSignature
	}

	var p payload
	dec := json.NewDecoder(bytes.NewReader(s.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Facts{}, Meta{}, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Facts{}, Meta{}, fmt.Errorf("%w: payload has data after the object", ErrMalformed)
	}
	if p.Seq == 0 {
		return Facts{}, Meta{}, fmt.Errorf("%w: seq must be positive", ErrMalformed)
	}
	if len(p.IssuedAt) > MaxTimestampBytes {
		return Facts{}, Meta{}, fmt.Errorf("%w: issued_at is too long", ErrMalformed)
	}
	issued, err := time.Parse(time.RFC3339Nano, p.IssuedAt)
	if err != nil {
		return Facts{}, Meta{}, fmt.Errorf("%w: issued_at: %v", ErrMalformed, err)
	}
	if p.TTLSeconds < int64(MinTTL/time.Second) || p.TTLSeconds > int64(MaxTTL/time.Second) {
		return Facts{}, Meta{}, fmt.Errorf("%w: %d seconds is outside %s..%s", ErrInvalidTTL, p.TTLSeconds, MinTTL, MaxTTL)
	}
	if id := identity.NodeID(pub); p.Facts.NodeID != id {
		return Facts{}, Meta{}, fmt.Errorf("%w: facts name %q, key is %q", ErrNodeIDMismatch, p.Facts.NodeID, id)
	}
	if err := p.Facts.Validate(); err != nil {
		return Facts{}, Meta{}, err
	}
	if issued.After(now.Add(MaxFutureSkew)) {
		return Facts{}, Meta{}, fmt.Errorf("%w: issued at %s, now is %s", ErrFromFuture, issued.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	ttl := time.Duration(p.TTLSeconds) * time.Second
	m := Meta{
		Seq:       p.Seq,
		IssuedAt:  issued.UTC(),
		TTL:       ttl,
		ExpiresAt: issued.UTC().Add(ttl),
	}
	m.Expired = !now.Before(m.ExpiresAt)
	return p.Facts, m, nil
}
