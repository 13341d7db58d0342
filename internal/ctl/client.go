package ctl

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Class is the outcome class of a failed call (reference section 2.9).
type Class int

// The classes of a failed call.
const (
	// ClassRefused: the target answered with a valid signed refusal.
	// Definitive.
	ClassRefused Class = iota + 1
	// ClassUnreachable: the request never left whole, or the method is
	// read-only. Safe to try another target.
	ClassUnreachable
	// ClassIndeterminate: a mutating request left and no valid signed
	// answer came back; the target may have acted. The caller reconciles
	// with that target before trying any other.
	ClassIndeterminate
)

// String names the class for logs and metrics labels.
func (c Class) String() string {
	switch c {
	case ClassRefused:
		return "refused"
	case ClassUnreachable:
		return "unreachable"
	case ClassIndeterminate:
		return "indeterminate"
	default:
		return "unknown"
	}
}

// CallError is the error of a call that was attempted: its class, the
// refusal for ClassRefused, and the underlying error otherwise.
type CallError struct {
	Class   Class
	Method  Method
	Refusal *Refusal
	Err     error
}

// Error renders the failure.
func (e *CallError) Error() string {
	if e.Refusal != nil {
		return fmt.Sprintf("%s %s: %v", e.Method, e.Class, e.Refusal)
	}
	return fmt.Sprintf("%s %s: %v", e.Method, e.Class, e.Err)
}

// Unwrap returns the underlying error (a *Refusal for ClassRefused).
func (e *CallError) Unwrap() error {
	if e.Refusal != nil {
		return e.Refusal
	}
	return e.Err
}

// ErrInvalidCall is wrapped by Call's errors for calls it refuses to send
// (a caller bug, not a *CallError): a mutating call without a well-formed
// decision id, a wildcard target for anything but describe, a target key
// that is not the target id's, a body that does not encode or is too large.
var ErrInvalidCall = errors.New("invalid ctl call")

// Target is the node a call addresses.
type Target struct {
	// ID is the node id, or WildcardTarget (describe only).
	ID string
	// Key, when set, is the only key the answer may be signed with. It
	// must be the key of ID.
	Key ed25519.PublicKey
}

// Opener opens a fresh stream to the target for one call.
type Opener func(ctx context.Context) (Stream, error)

// Answer is a verified successful response.
type Answer struct {
	// Request is the request as sent.
	Request Request
	// Response is the verified response; Response.Result is the result.
	Response Response
	// ResponderKey is the key that signed the response (for a wildcard
	// describe, the responder's identity, to be trusted on first use or
	// not by the caller).
	ResponderKey ed25519.PublicKey
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// Key signs every request.
	Key ed25519.PrivateKey
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Rand is the nonce source; nil means crypto/rand.
	Rand io.Reader
	// TTL is each request's lifetime; 0 means DefaultTTL. At most
	// MaxLifetime. A read-only request (describe, status, logs) lives at
	// most ReadOnlyTTL, so a target that is not the caller's to control
	// accepts it (MaxReadOnlyLifetime).
	TTL time.Duration
}

// Client sends signed workload.ctl calls. It is safe for concurrent use
// and starts no goroutines.
type Client struct {
	key  ed25519.PrivateKey
	now  func() time.Time
	rand io.Reader
	ttl  time.Duration
}

// NewClient validates cfg and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := checkKey(cfg.Key); err != nil {
		return nil, fmt.Errorf("ctl client: %w", err)
	}
	if cfg.TTL < 0 || cfg.TTL > MaxLifetime {
		return nil, fmt.Errorf("ctl client: ttl %s outside (0, %s]", cfg.TTL, MaxLifetime)
	}
	c := &Client{key: cfg.Key, now: cfg.Now, rand: cfg.Rand, ttl: cfg.TTL}
	if c.now == nil {
		c.now = time.Now
	}
	if c.rand == nil {
		c.rand = rand.Reader
	}
	if c.ttl == 0 {
		c.ttl = DefaultTTL
	}
	return c, nil
}

// Call sends one request on a stream from open and waits for its answer,
// until ctx is done. It returns the verified answer for a signed ok; a
// *CallError for a signed refusal (ClassRefused), for a request that never
// left whole (ClassUnreachable), and for any failure after it left: a
// read-only method is ClassUnreachable, a mutating one ClassIndeterminate.
// Errors wrapping ErrInvalidCall mean nothing was attempted. Call closes
// the stream before it returns.
func (c *Client) Call(ctx context.Context, open Opener, target Target, method Method, body any, decisionID string) (*Answer, error) {
	return c.CallTerm(ctx, open, target, method, body, decisionID, 0)
}

// CallTerm is Call for a controller: the request carries term, the raft
// term the controller holds (0: none, as Call). A host that has seen a
// higher term from its controllers refuses it with CodeStaleTerm, which
// the returned *CallError matches as ErrStaleTerm.
func (c *Client) CallTerm(ctx context.Context, open Opener, target Target, method Method, body any, decisionID string, term uint64) (*Answer, error) {
	req, wire, err := c.build(target, method, body, decisionID, term)
	if err != nil {
		return nil, err
	}
	unreachable := func(err error) (*Answer, error) {
		return nil, &CallError{Class: ClassUnreachable, Method: method, Err: err}
	}
	afterSend := func(err error) (*Answer, error) {
		class := ClassUnreachable
		if IsMutating(method) {
			class = ClassIndeterminate
		}
		return nil, &CallError{Class: class, Method: method, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return unreachable(err)
	}
	st, err := open(ctx)
	if err != nil {
		return unreachable(fmt.Errorf("open ctl stream: %w", err))
	}
	release := closeOnDone(ctx, st)
	defer release()
	defer st.Close()

	msg := encodeMessage(wire)
	if n, err := st.Write(msg); err != nil {
		if n < len(msg) {
			// The last frame never left whole: the target cannot have
			// read the request.
			return unreachable(fmt.Errorf("write ctl request: %w", err))
		}
		return afterSend(fmt.Errorf("write ctl request: %w", err))
	}
	respWire, err := ReadMessage(st, MaxResponseBytes)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%w)", ctxErr, err)
		}
		return afterSend(fmt.Errorf("read ctl response: %w", err))
	}
	resp, pub, err := VerifyResponse(respWire, req, target.Key)
	if err != nil {
		return afterSend(err)
	}
	if resp.Outcome == OutcomeRefused {
		return nil, &CallError{Class: ClassRefused, Method: method, Refusal: resp.Refusal}
	}
	return &Answer{Request: req, Response: resp, ResponderKey: pub}, nil
}

// build checks a call and makes its signed request.
func (c *Client) build(target Target, method Method, body any, decisionID string, term uint64) (Request, []byte, error) {
	invalid := func(format string, args ...any) (Request, []byte, error) {
		return Request{}, nil, fmt.Errorf("%s: %s: %w", method, fmt.Sprintf(format, args...), ErrInvalidCall)
	}
	switch {
	case target.ID == "":
		return invalid("no target")
	case target.ID == WildcardTarget && method != MethodDescribe:
		return invalid("wildcard target")
	case target.Key != nil && (len(target.Key) != ed25519.PublicKeySize || nodeID(target.Key) != target.ID):
		return invalid("target key is not the key of %s", target.ID)
	case IsMutating(method) && !ValidDecisionID(decisionID):
		return invalid("mutating call without a well-formed decision id")
	case decisionID != "" && !ValidDecisionID(decisionID):
		return invalid("malformed decision id")
	}
	var raw json.RawMessage
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return invalid("encode body: %v", err)
		}
		raw = b
	}
	nonce, err := NewNonce(c.rand)
	if err != nil {
		return Request{}, nil, fmt.Errorf("%s: %w", method, err)
	}
	now := c.now()
	req := Request{
		Version:     requestVersion(term),
		Method:      method,
		Requester:   nodeIDOfPrivate(c.key),
		Target:      target.ID,
		Nonce:       nonce,
		IssuedAtMS:  now.UnixMilli(),
		ExpiresAtMS: now.Add(c.lifetime(method)).UnixMilli(),
		DecisionID:  decisionID,
		Body:        raw,
		Term:        term,
	}
	wire, err := SignRequest(c.key, req)
	if err != nil {
		return invalid("%v", err)
	}
	return req, wire, nil
}

// lifetime is the lifetime of a request of method: the client's TTL, at
// most ReadOnlyTTL for a read-only method.
func (c *Client) lifetime(method Method) time.Duration {
	if !IsMutating(method) {
		return min(c.ttl, ReadOnlyTTL)
	}
	return c.ttl
}
