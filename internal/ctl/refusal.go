package ctl

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Code is a stable snake_case refusal code. Codes cross the mesh and are
// chained; callers branch on them, never on the reason text.
type Code string

// The refusal codes of reference section 2.6, plus CodePeerMismatch and
// CodeStaleTerm.
const (
	// CodeSignature: bad envelope, key or signature; payload not
	// parseable; requester is not the signing key's node id.
	CodeSignature Code = "signature"
	// CodePeerMismatch: the envelope is signed by a key other than the
	// one the stream's QUIC peer authenticated with.
	CodePeerMismatch Code = "peer_mismatch"
	// CodeExpired: expired, issued too far in the future, or a lifetime
	// above MaxLifetime or negative.
	CodeExpired Code = "expired"
	// CodeReplay: the nonce was seen before, or the nonce guard is full of
	// live nonces (fail closed).
	CodeReplay Code = "replay"
	// CodeNotForMe: the request targets another node.
	CodeNotForMe Code = "not_for_me"
	// CodeUnauthorized: the signer may not call this method here.
	CodeUnauthorized Code = "unauthorized"
	// CodeUnknownMethod: a workload.* method outside the eight.
	CodeUnknownMethod Code = "unknown_method"
	// CodeInvalidRequest: wrong version, bad nonce, missing or malformed
	// decision id on a mutation, malformed parameters.
	CodeInvalidRequest Code = "invalid_request"
	// CodeGovernance: policy denied the action (including revocation).
	CodeGovernance Code = "governance"
	// CodeAdmission: the node cannot run this workload.
	CodeAdmission Code = "admission"
	// CodeFetch: the package could not be fetched.
	CodeFetch Code = "fetch"
	// CodeVerify: the package failed verification.
	CodeVerify Code = "verify"
	// CodeRuntime: the runtime adapter failed.
	CodeRuntime Code = "runtime"
	// CodeUnknownInstance: no such instance on this node.
	CodeUnknownInstance Code = "unknown_instance"
	// CodeStaleTerm: a controller's call carries a raft term below the
	// highest this host has seen from its controllers (or none, on a
	// mutation, once it has seen one): the caller is a deposed leader. It
	// must stop acting, not try another host (ErrStaleTerm).
	CodeStaleTerm Code = "stale_term"
)

// ErrStaleTerm matches (errors.Is) a refusal with CodeStaleTerm, and so a
// *CallError carrying one: the host fenced the caller off by raft term. A
// controller that gets it was deposed and must stop placing, not try the
// next candidate as it does for other refusals.
var ErrStaleTerm = errors.New("refused: stale controller term")

// Codes returns every refusal code in a fixed order.
func Codes() []Code {
	return []Code{
		CodeSignature, CodePeerMismatch, CodeExpired, CodeReplay, CodeNotForMe,
		CodeUnauthorized, CodeUnknownMethod, CodeInvalidRequest, CodeGovernance,
		CodeAdmission, CodeFetch, CodeVerify, CodeRuntime, CodeUnknownInstance,
		CodeStaleTerm,
	}
}

// Known reports whether c is one of the refusal codes.
func (c Code) Known() bool {
	for _, k := range Codes() {
		if c == k {
			return true
		}
	}
	return false
}

// Refusal is a signed "no": a stable code and a human reason. It
// implements error so that parameter decoders can return it directly.
type Refusal struct {
	Code   Code   `json:"code"`
	Reason string `json:"reason"`
}

// NewRefusal builds a refusal, cutting the reason to MaxReasonBytes on a
// UTF-8 boundary.
func NewRefusal(code Code, reason string) *Refusal {
	return &Refusal{Code: code, Reason: clip(reason, MaxReasonBytes)}
}

// Error renders the refusal as "<code> refused: <reason>".
func (r *Refusal) Error() string { return fmt.Sprintf("%s refused: %s", r.Code, r.Reason) }

// Is matches ErrStaleTerm for a CodeStaleTerm refusal.
func (r *Refusal) Is(target error) bool { return target == ErrStaleTerm && r.Code == CodeStaleTerm }

// clip cuts s to at most n bytes without splitting a UTF-8 sequence.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
