package ctl

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Request is a workload.ctl request (reference section 2.3). It is signed
// as the exact JSON bytes sent; the receiver parses those bytes only after
// the signature verified.
type Request struct {
	// Version is Version, or VersionTerm exactly when Term is set.
	Version int `json:"version"`
	// Method is the call.
	Method Method `json:"method"`
	// Requester is the node id of the signing key.
	Requester string `json:"requester"`
	// Target is the node id addressed, or WildcardTarget for describe.
	Target string `json:"target"`
	// Nonce is 16 random bytes in lower hex; see NewNonce.
	Nonce string `json:"nonce"`
	// IssuedAtMS is when the request was made, in Unix milliseconds.
	IssuedAtMS int64 `json:"issued_at_ms"`
	// ExpiresAtMS is when the request stops being valid, in Unix
	// milliseconds.
	ExpiresAtMS int64 `json:"expires_at_ms"`
	// DecisionID is the controller's chained decision hash (64 lower
	// hex), required for mutating methods and otherwise omitted.
	DecisionID string `json:"decision_id,omitempty"`
	// Body holds the method's parameters (params.go); null when absent.
	Body json.RawMessage `json:"body"`
	// Term is the raft term of the controller that sent the call, inside
	// the signed bytes, so that a host can refuse a deposed leader
	// (CodeStaleTerm); 0, and absent on the wire, for a call from no
	// replicated controller (an operator's own call, an older caller).
	Term uint64 `json:"term,omitempty"`
}

// IssuedAt returns IssuedAtMS as a time.
func (r Request) IssuedAt() time.Time { return time.UnixMilli(r.IssuedAtMS) }

// ExpiresAt returns ExpiresAtMS as a time.
func (r Request) ExpiresAt() time.Time { return time.UnixMilli(r.ExpiresAtMS) }

// Outcome tags a response.
type Outcome string

// The two outcomes.
const (
	OutcomeOK      Outcome = "ok"
	OutcomeRefused Outcome = "refused"
)

// Response is a workload.ctl response (reference section 2.5, flattened:
// the outcome tag, then either result or refusal). Like a request it is
// signed as the exact bytes sent.
type Response struct {
	// Version is always Version.
	Version int `json:"version"`
	// Method is the method answered: the signed one, or for a refusal of
	// an unauthenticated request whatever could be read from its
	// unverified payload (possibly empty).
	Method Method `json:"method"`
	// Responder is the node id of the signing key.
	Responder string `json:"responder"`
	// RequestNonce is the nonce of the request answered (empty when an
	// unauthenticated request's payload was unreadable).
	RequestNonce string `json:"request_nonce"`
	// Outcome is OutcomeOK or OutcomeRefused.
	Outcome Outcome `json:"outcome"`
	// Result is the method's result when Outcome is OutcomeOK.
	Result json.RawMessage `json:"result,omitempty"`
	// Refusal is set exactly when Outcome is OutcomeRefused.
	Refusal *Refusal `json:"refusal,omitempty"`
}

// OK reports whether the response is a success.
func (r Response) OK() bool { return r.Outcome == OutcomeOK }

// envelope is the wire form of a signed message. Payload is carried as
// base64 so the verifier sees exactly the bytes that were signed, with no
// string escaping in between.
type envelope struct {
	Payload   []byte `json:"payload"`
	PublicKey string `json:"public_key"`
	Signature string `json:"signature"`
}

// decodedEnvelope is a decoded, not yet verified, signed message.
type decodedEnvelope struct {
	// Payload is the exact signed bytes.
	Payload []byte
	// PublicKey is the claimed signing key.
	PublicKey []byte
	// Signature is the claimed ed25519 signature.
	Signature []byte
}

var (
	errTrailingData = errors.New("trailing data after the JSON value")
	errNotObject    = errors.New("not a JSON object")
)

// decodeStrict decodes one JSON object from data onto v, rejecting unknown
// fields and anything after the object.
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimLeft(data, " \t\r\n")) == 0 || bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
		return errNotObject
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errTrailingData
	}
	return nil
}

// decodeEnvelope parses wire as an envelope and checks the form of its
// fields: lower-hex key of 32 bytes, lower-hex signature of 64 bytes, a
// payload of at most maxPayload bytes.
func decodeEnvelope(wire []byte, maxPayload int) (decodedEnvelope, error) {
	var e envelope
	if err := decodeStrict(wire, &e); err != nil {
		return decodedEnvelope{}, fmt.Errorf("envelope: %w", err)
	}
	if len(e.Payload) == 0 {
		return decodedEnvelope{}, errors.New("envelope: empty payload")
	}
	if len(e.Payload) > maxPayload {
		return decodedEnvelope{}, fmt.Errorf("envelope: payload of %d bytes, bound %d", len(e.Payload), maxPayload)
	}
	pub, err := lowerHex(e.PublicKey, 32)
	if err != nil {
		return decodedEnvelope{}, fmt.Errorf("envelope public key: %w", err)
	}
	sig, err := lowerHex(e.Signature, 64)
	if err != nil {
		return decodedEnvelope{}, fmt.Errorf("envelope signature: %w", err)
	}
	return decodedEnvelope{Payload: e.Payload, PublicKey: pub, Signature: sig}, nil
}

// lowerHex decodes s, which must be exactly n bytes in lower-case hex.
func lowerHex(s string, n int) ([]byte, error) {
	if len(s) != 2*n || !isLowerHex(s) {
		return nil, fmt.Errorf("want %d lower-case hex characters", 2*n)
	}
	return hex.DecodeString(s)
}

// isLowerHex reports whether s is non-empty and only [0-9a-f].
func isLowerHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidNonce reports whether s has the form of a nonce: 32 lower hex.
func ValidNonce(s string) bool { return len(s) == NonceHexLen && isLowerHex(s) }

// ValidDecisionID reports whether s has the form of a decision id: 64
// lower hex. The host checks only the form; the controller's chain gives
// the id its meaning.
func ValidDecisionID(s string) bool { return len(s) == DecisionIDHexLen && isLowerHex(s) }

// MinDecisionPrefix is the shortest decision id prefix an operator may
// name a decision by (ctl placements shows 16 characters).
const MinDecisionPrefix = 8

// ValidDecisionPrefix reports whether s is a decision id or a prefix an
// operator may name one by: MinDecisionPrefix to 64 lower hex.
func ValidDecisionPrefix(s string) bool {
	return len(s) >= MinDecisionPrefix && len(s) <= DecisionIDHexLen && isLowerHex(s)
}

// NewNonce draws a fresh nonce from rand.
func NewNonce(rand io.Reader) (string, error) {
	var b [NonceHexLen / 2]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return "", fmt.Errorf("draw nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
