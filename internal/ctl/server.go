package ctl

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Stream is one bidirectional exchange carrying one workload.ctl call,
// positioned after the mesh's stream-kind byte. The host and controller
// adapt mesh streams to it; tests use net.Pipe.
type Stream interface {
	io.Reader
	io.Writer
	Close() error
}

// Handler serves a verified request whose method is one of the eight and
// whose decision id, for a mutating method, has the right form. It returns
// the result, marshalled to JSON by Serve, or a refusal. It must honour
// ctx.
type Handler func(ctx context.Context, req Request) (any, *Refusal)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Verifier checks requests.
	Verifier *Verifier
	// Key signs every response; it must be the key Verifier's Self is.
	Key ed25519.PrivateKey
	// Handler serves verified requests.
	Handler Handler
}

// Server answers workload.ctl calls, one per stream. It is safe for
// concurrent use and starts no goroutines of its own (Serve runs on the
// caller's).
type Server struct {
	verifier *Verifier
	key      ed25519.PrivateKey
	handler  Handler
}

// NewServer validates cfg and returns a Server.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Verifier == nil || cfg.Handler == nil {
		return nil, errors.New("ctl server: verifier and handler are required")
	}
	if err := checkKey(cfg.Key); err != nil {
		return nil, fmt.Errorf("ctl server: %w", err)
	}
	if id := nodeIDOfPrivate(cfg.Key); id != cfg.Verifier.SelfID() {
		return nil, fmt.Errorf("ctl server: key is node %s, verifier is node %s", id, cfg.Verifier.SelfID())
	}
	return &Server{verifier: cfg.Verifier, key: cfg.Key, handler: cfg.Handler}, nil
}

// Served reports what Serve did, for the host's chain and metrics.
type Served struct {
	// Authenticated is true when the request passed VerifyRequest.
	Authenticated bool
	// Request is the verified request; zero unless Authenticated.
	Request Request
	// Method and Nonce are what the response echoed: the verified values,
	// or for an unauthenticated request what could be read from it.
	Method Method
	Nonce  string
	// Refusal is the refusal sent, nil for a success.
	Refusal *Refusal
}

// Serve reads one request from st, verifies it against peerKey (the key
// the stream's QUIC peer authenticated with), answers with a signed
// response and closes st. Every request that is read whole gets a signed
// answer, refusals of unauthenticated requests included. The error reports
// only I/O: a stream that ended or failed before a request was read, or a
// response that could not be written. Cancelling ctx closes st.
func (s *Server) Serve(ctx context.Context, st Stream, peerKey ed25519.PublicKey) (Served, error) {
	release := closeOnDone(ctx, st)
	defer release()
	defer st.Close()

	wire, err := ReadMessage(st, MaxRequestBytes)
	switch {
	case errors.Is(err, ErrMessageTooLarge), errors.Is(err, ErrMalformedMessage):
		served := Served{Refusal: NewRefusal(CodeSignature, "request message too large or malformed")}
		return served, s.answer(st, served)
	case err != nil:
		return Served{}, fmt.Errorf("read ctl request: %w", err)
	}
	req, refusal := s.verifier.VerifyRequest(wire, peerKey)
	if refusal != nil {
		method, nonce := peek(wire)
		served := Served{Method: method, Nonce: nonce, Refusal: refusal}
		return served, s.answer(st, served)
	}
	served := Served{Authenticated: true, Request: req, Method: req.Method, Nonce: req.Nonce}
	result, refusal := s.dispatch(ctx, req)
	if refusal != nil {
		served.Refusal = refusal
		return served, s.answer(st, served)
	}
	resp := Response{Method: req.Method, RequestNonce: req.Nonce, Outcome: OutcomeOK, Result: result}
	wireResp, err := SignResponse(s.key, resp)
	if err != nil {
		served.Refusal = NewRefusal(CodeRuntime, "result too large or not encodable")
		return served, s.answer(st, served)
	}
	if err := WriteMessage(st, wireResp); err != nil {
		return served, fmt.Errorf("write ctl response: %w", err)
	}
	return served, nil
}

// dispatch checks what verification leaves to the dispatcher (method name,
// decision id form) and runs the handler.
func (s *Server) dispatch(ctx context.Context, req Request) (json.RawMessage, *Refusal) {
	if r := checkMethod(req.Method); r != nil {
		return nil, r
	}
	if IsMutating(req.Method) && !ValidDecisionID(req.DecisionID) {
		return nil, NewRefusal(CodeInvalidRequest, "mutations carry a decision id (64 lower-case hex)")
	}
	if req.DecisionID != "" && !ValidDecisionID(req.DecisionID) {
		return nil, NewRefusal(CodeInvalidRequest, "malformed decision id")
	}
	result, refusal := s.handler(ctx, req)
	if refusal != nil {
		if !refusal.Code.Known() {
			refusal = NewRefusal(CodeRuntime, refusal.Reason)
		}
		return nil, NewRefusal(refusal.Code, refusal.Reason)
	}
	raw, err := json.Marshal(result)
	if err != nil {
		return nil, NewRefusal(CodeRuntime, "result not encodable")
	}
	return raw, nil
}

// answer writes the signed refusal in served.
func (s *Server) answer(st Stream, served Served) error {
	wire, err := SignResponse(s.key, Response{
		Method:       served.Method,
		RequestNonce: served.Nonce,
		Outcome:      OutcomeRefused,
		Refusal:      served.Refusal,
	})
	if err != nil {
		return fmt.Errorf("sign ctl refusal: %w", err)
	}
	if err := WriteMessage(st, wire); err != nil {
		return fmt.Errorf("write ctl refusal: %w", err)
	}
	return nil
}

// peek reads the method and nonce of an unverified request, so that its
// refusal can name them. It echoes only a well-formed nonce and a short
// printable method.
func peek(wire []byte) (Method, string) {
	env, err := decodeEnvelope(wire, MaxRequestPayloadBytes)
	if err != nil {
		return "", ""
	}
	var p struct {
		Method string `json:"method"`
		Nonce  string `json:"nonce"`
	}
	if json.Unmarshal(env.Payload, &p) != nil {
		return "", ""
	}
	method := Method(p.Method)
	if !printableToken(p.Method, MaxMethodBytes) {
		method = ""
	}
	nonce := p.Nonce
	if !ValidNonce(nonce) {
		nonce = ""
	}
	return method, nonce
}

// printableToken reports whether s is 1..n bytes of printable ASCII
// without spaces.
func printableToken(s string, n int) bool {
	if s == "" || len(s) > n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// closeOnDone closes c when ctx is done, so that blocked reads and writes
// on it return. The returned release must be called once; it waits for a
// close already started, so no goroutine outlives the call.
func closeOnDone(ctx context.Context, c io.Closer) (release func()) {
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		_ = c.Close()
	})
	return func() {
		if !stop() {
			<-done
		}
	}
}

// nodeIDOfPrivate returns the node id of a private key's public half.
func nodeIDOfPrivate(key ed25519.PrivateKey) string {
	return nodeID(key.Public().(ed25519.PublicKey))
}
