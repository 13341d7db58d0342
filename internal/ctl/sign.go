package ctl

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nodeld/nodeld/internal/identity"
)

// ErrBadKey is returned when a signing key is not an ed25519 private key.
var ErrBadKey = errors.New("not an ed25519 private key")

// signedBytes returns the bytes an ed25519 signature covers: the domain
// tag, a NUL byte, then the payload exactly as sent.
func signedBytes(domain string, payload []byte) []byte {
	msg := make([]byte, 0, len(domain)+1+len(payload))
	msg = append(msg, domain...)
	msg = append(msg, 0)
	return append(msg, payload...)
}

// seal signs payload under domain and returns the envelope's wire bytes.
func seal(key ed25519.PrivateKey, domain string, payload []byte) []byte {
	pub := key.Public().(ed25519.PublicKey)
	sig := ed25519.Sign(key, signedBytes(domain, payload))
	wire, err := json.Marshal(envelope{
		Payload:   payload,
		PublicKey: hex.EncodeToString(pub),
		Signature: hex.EncodeToString(sig),
	})
	if err != nil {
		// A struct of a byte slice and two strings always marshals.
		panic(fmt.Sprintf("marshal envelope: %v", err))
	}
	return wire
}

// open checks an envelope's form and its signature under domain. It
// returns the verified payload bytes and the signing key.
func open(wire []byte, domain string, maxPayload int) ([]byte, ed25519.PublicKey, error) {
	env, err := decodeEnvelope(wire, maxPayload)
	if err != nil {
		return nil, nil, err
	}
	pub := ed25519.PublicKey(env.PublicKey)
	if !ed25519.Verify(pub, signedBytes(domain, env.Payload), env.Signature) {
		return nil, nil, errors.New("signature does not verify")
	}
	return env.Payload, pub, nil
}

func checkKey(key ed25519.PrivateKey) error {
	if len(key) != ed25519.PrivateKeySize {
		return fmt.Errorf("sign: key of %d bytes: %w", len(key), ErrBadKey)
	}
	return nil
}

// SignRequest signs req with key and returns the wire bytes of its
// envelope. It sets Version (VersionTerm when req carries a Term, so that
// a call without one is byte for byte what it was before terms), and
// Requester to the key's node id; a nil Body is sent as null.
func SignRequest(key ed25519.PrivateKey, req Request) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	req.Version = requestVersion(req.Term)
	req.Requester = identity.NodeID(key.Public().(ed25519.PublicKey))
	payload, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("marshal request: %w", err)
	}
	if len(payload) > MaxRequestPayloadBytes {
		return nil, fmt.Errorf("request payload of %d bytes exceeds %d", len(payload), MaxRequestPayloadBytes)
	}
	return seal(key, RequestDomain, payload), nil
}

// requestVersion is the version of a request carrying term.
func requestVersion(term uint64) int {
	if term != 0 {
		return VersionTerm
	}
	return Version
}

// SignResponse signs resp with key and returns the wire bytes of its
// envelope. It sets Version, and Responder to the key's node id.
func SignResponse(key ed25519.PrivateKey, resp Response) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	resp.Version = Version
	resp.Responder = identity.NodeID(key.Public().(ed25519.PublicKey))
	payload, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("marshal response: %w", err)
	}
	if len(payload) > MaxResponsePayloadBytes {
		return nil, fmt.Errorf("response payload of %d bytes exceeds %d", len(payload), MaxResponsePayloadBytes)
	}
	return seal(key, ResponseDomain, payload), nil
}

// nodeID is identity.NodeID, named here for brevity.
func nodeID(pub ed25519.PublicKey) string { return identity.NodeID(pub) }
