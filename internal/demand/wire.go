package demand

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
)

// Frame types of a KindDemand stream: one request, then one answer.
const (
	FrameRequest  mesh.FrameType = 1
	FrameResponse mesh.FrameType = 2
)

// Code is a refusal code of the demand call.
type Code string

// Refusal codes. Values are part of the wire protocol and metric labels.
const (
	CodeSignature    Code = "signature"     // envelope, signature or requester
	CodePeerMismatch Code = "peer_mismatch" // signed by a key other than the link's
	CodeNotForMe     Code = "not_for_me"
	CodeExpired      Code = "expired"
	CodeInvalid      Code = "invalid_request"
	CodeReplay       Code = "replay"
	CodeRateLimited  Code = "rate_limited"
	CodeUnknownRole  Code = "unknown_role"
	CodeNotAllowed   Code = "not_allowed"
	CodeUnavailable  Code = "unavailable" // the handler failed
)

// codes lists the refusal codes, for bounded metric labels.
var codes = []Code{CodeSignature, CodePeerMismatch, CodeNotForMe, CodeExpired, CodeInvalid,
	CodeReplay, CodeRateLimited, CodeUnknownRole, CodeNotAllowed, CodeUnavailable}

func knownCode(c Code) bool {
	for _, k := range codes {
		if k == c {
			return true
		}
	}
	return false
}

// Request is a demand call's signed payload.
type Request struct {
	Version int `json:"version"`
	// Role is the role demanded.
	Role string `json:"role"`
	// Requester is the node id of the signing key.
	Requester string `json:"requester"`
	// Target is the controller's node id.
	Target      string `json:"target"`
	Nonce       string `json:"nonce"`
	IssuedAtMS  int64  `json:"issued_at_ms"`
	ExpiresAtMS int64  `json:"expires_at_ms"`
}

// Response is an answer's signed payload: a state, or a refusal code.
type Response struct {
	Version int `json:"version"`
	// Responder is the node id of the signing key.
	Responder string `json:"responder"`
	// Requester and Nonce are the request's, empty when it was refused
	// before it was read (rate_limited).
	Requester string `json:"requester"`
	Nonce     string `json:"nonce"`
	Role      string `json:"role"`
	// State is the workload's on-demand state when the call is taken.
	State string `json:"state,omitempty"`
	// Code and Message say why it was refused.
	Code    Code   `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Refused is the error of a call the controller refused with a valid
// signed answer.
type Refused struct {
	Code    Code
	Message string
}

func (r *Refused) Error() string { return fmt.Sprintf("demand refused: %s: %s", r.Code, r.Message) }

var errBadAnswer = errors.New("demand answer not valid")

// sealJSON marshals v and signs it under domain.
func sealJSON(key ed25519.PrivateKey, domain string, v any) ([]byte, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshal: %w", err)
	}
	if len(payload) > MaxPayloadBytes {
		return nil, fmt.Errorf("payload of %d bytes exceeds %d", len(payload), MaxPayloadBytes)
	}
	return ctl.Seal(key, domain, payload)
}

// decodeRequest opens a request frame: envelope form and signature, then
// a strict parse, the version, the requester bound to the signing key and
// the form of every field. It returns the request and the signing key, or
// the refusal code.
func decodeRequest(wire []byte) (Request, ed25519.PublicKey, Code, error) {
	payload, pub, err := ctl.Open(wire, RequestDomain, MaxPayloadBytes)
	if err != nil {
		return Request{}, nil, CodeSignature, err
	}
	var req Request
	if err := ctl.DecodeStrict(payload, &req); err != nil {
		return Request{}, nil, CodeSignature, fmt.Errorf("payload: %w", err)
	}
	switch {
	case req.Version != Version:
		return Request{}, nil, CodeInvalid, fmt.Errorf("version %d", req.Version)
	case req.Requester != identity.NodeID(pub):
		return Request{}, nil, CodeSignature, errors.New("requester is not the signing key")
	case !ctl.ValidNonce(req.Nonce):
		return Request{}, nil, CodeInvalid, errors.New("nonce form")
	case !grammar.ValidName(req.Role):
		return Request{}, nil, CodeInvalid, errors.New("role is not a name")
	}
	return req, pub, "", nil
}

// decodeResponse opens an answer frame: envelope form, signature by
// expected, strict parse, version, and that it answers req: the responder
// is expected's node id, the role req's, and the nonce req's (or empty on
// a rate_limited refusal, sent before the request was read).
func decodeResponse(wire []byte, req Request, expected ed25519.PublicKey) (Response, error) {
	payload, pub, err := ctl.Open(wire, ResponseDomain, MaxPayloadBytes)
	if err != nil {
		return Response{}, fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	if !pub.Equal(expected) {
		return Response{}, fmt.Errorf("%w: signed by another key", errBadAnswer)
	}
	var resp Response
	if err := ctl.DecodeStrict(payload, &resp); err != nil {
		return Response{}, fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	early := resp.Code == CodeRateLimited && resp.Nonce == "" && resp.Role == ""
	switch {
	case resp.Version != Version:
		return Response{}, fmt.Errorf("%w: version %d", errBadAnswer, resp.Version)
	case resp.Responder != identity.NodeID(pub):
		return Response{}, fmt.Errorf("%w: responder is not the signing key", errBadAnswer)
	case !early && (resp.Nonce != req.Nonce || resp.Role != req.Role || resp.Requester != req.Requester):
		return Response{}, fmt.Errorf("%w: answers another request", errBadAnswer)
	case resp.Code == "" && !validState(resp.State):
		return Response{}, fmt.Errorf("%w: state %q", errBadAnswer, resp.State)
	case resp.Code != "" && !knownCode(resp.Code):
		return Response{}, fmt.Errorf("%w: code %q", errBadAnswer, resp.Code)
	case len(resp.Message) > 256:
		return Response{}, fmt.Errorf("%w: message too long", errBadAnswer)
	}
	return resp, nil
}
