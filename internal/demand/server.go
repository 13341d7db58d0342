package demand

import (
	"context"
	"crypto/ed25519"
	"errors"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/table"
)

// AuditSource is the chain source of this package's records.
const AuditSource = "demand"

// KindRefused is the chain kind of a refused demand call, chained through
// the Recorder keyed by peer and code (never by the role it names).
const KindRefused = "demand.refused"

// Standby is one workload the controller can start on demand, as its
// Source lists it.
type Standby struct {
	Role, Workload, Model string
	// MaxWait is how long a request may wait for it.
	MaxWait time.Duration
	// DemandFrom are the node ids allowed to demand it (the controller's
	// own node is always allowed).
	DemandFrom []string
	// State is its on-demand state: table.StateCold, StateStarting,
	// StateReady or StateIdle.
	State string
}

// Source lists the on-demand workloads a controller offers. The
// controller implements it.
type Source interface {
	Standby() []Standby
}

// DemandHandler takes an allowed demand: start role for fromNodeID if it
// is not running or starting, and say its state. It must be idempotent
// (a demand may come again while the first is starting) and return soon:
// it starts a placement, it does not wait for it. The controller
// implements it.
type DemandHandler interface {
	Demand(ctx context.Context, role, fromNodeID string) (state string, err error)
}

// Recorder chains events a remote party can trigger (*chain.Recorder).
type Recorder interface {
	Record(key chain.RecordKey, source string, payload any) (chained bool, err error)
}

var _ Recorder = (*chain.Recorder)(nil)

// RefusedEvent is the payload of a KindRefused record.
type RefusedEvent struct {
	Peer string `json:"peer"`
	Code Code   `json:"code"`
	// Role is the role named, only when it is a valid name.
	Role string `json:"role,omitempty"`
}

// ServerDeps are a Server's collaborators.
type ServerDeps struct {
	// Key signs the answers; its node id is this node's. Required.
	Key ed25519.PrivateKey
	// Source and Handler are the controller's; required.
	Source  Source
	Handler DemandHandler
	// Recorder chains refusals; nil only counts and logs them.
	Recorder Recorder
	Logger   *zap.Logger
	// Now is the clock of signed times (lifetimes, nonces); nil means
	// time.Now.
	Now func() time.Time
	// WindowNow is the clock of the token buckets; nil means time.Now.
	WindowNow func() time.Time
}

// Server is the controller side of the demand call.
type Server struct {
	key    ed25519.PrivateKey
	self   string
	src    Source
	h      DemandHandler
	rec    Recorder
	log    *zap.Logger
	now    func() time.Time
	window func() time.Time
	met    *metrics
	nonces *ctl.PeerNonceGuard

	mu       sync.Mutex // guards buckets and inflight
	buckets  map[string]*bucket
	inflight map[string]bool // roles with a handler call in flight
}

// bucket is one peer's token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

func newServer(deps ServerDeps, met *metrics) (*Server, error) {
	if len(deps.Key) != ed25519.PrivateKeySize || deps.Source == nil || deps.Handler == nil {
		return nil, errors.New("demand server: key, source and handler are required")
	}
	g, err := ctl.NewPeerNonceGuard(ctl.PeerNonceLimits{})
	if err != nil {
		return nil, err
	}
	s := &Server{key: deps.Key, self: identity.NodeID(deps.Key.Public().(ed25519.PublicKey)),
		src: deps.Source, h: deps.Handler, rec: deps.Recorder, log: deps.Logger, now: deps.Now, window: deps.WindowNow,
		met: met, nonces: g, buckets: make(map[string]*bucket), inflight: make(map[string]bool)}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.window == nil {
		s.window = time.Now
	}
	return s, nil
}

// ServeStream serves one KindDemand stream from peer (a mesh.Handler):
// one request frame, one signed answer.
func (s *Server) ServeStream(ctx context.Context, peer mesh.PeerInfo, st *mesh.Stream) {
	_ = st.SetDeadline(time.Now().Add(StreamTimeout))
	typ, wire, err := mesh.ReadFrame(st, MaxRequestBytes)
	if err != nil || typ != FrameRequest {
		s.met.served.WithLabelValues("malformed").Inc()
		st.Reset(mesh.StreamCodeMalformed)
		return
	}
	resp := s.serve(ctx, peer, wire)
	out, err := sealJSON(s.key, ResponseDomain, resp)
	if err != nil {
		s.log.Error("demand answer not signed", zap.Error(err))
		st.Reset(mesh.StreamCodeCancelled)
		return
	}
	if err := mesh.WriteFrame(st, FrameResponse, out); err != nil {
		st.Reset(mesh.StreamCodeCancelled)
		return
	}
	_ = st.Close()
}

// serve answers one request frame from peer.
func (s *Server) serve(ctx context.Context, peer mesh.PeerInfo, wire []byte) Response {
	resp := Response{Version: Version, Responder: s.self}
	if !s.take(peer.ID) {
		return s.refuse(resp, peer.ID, CodeRateLimited, "", "too many demand calls")
	}
	req, pub, code, err := decodeRequest(wire)
	if err != nil {
		return s.refuse(resp, peer.ID, code, "", err.Error())
	}
	resp.Requester, resp.Nonce, resp.Role = req.Requester, req.Nonce, req.Role
	now := s.now()
	switch {
	case !pub.Equal(peer.Key):
		return s.refuse(resp, peer.ID, CodePeerMismatch, req.Role, "not signed by the link's key")
	case req.Target != s.self:
		return s.refuse(resp, peer.ID, CodeNotForMe, req.Role, "not for this node")
	}
	if r := ctl.CheckLifetime(req.IssuedAtMS, req.ExpiresAtMS, now, MaxLifetime); r != nil {
		return s.refuse(resp, peer.ID, CodeExpired, req.Role, r.Reason)
	}
	if code, msg := s.allowed(req.Role, peer.ID); code != "" {
		return s.refuse(resp, peer.ID, code, req.Role, msg)
	}
	// The nonce is burned last, for a call that is otherwise valid.
	if err := s.nonces.Admit(peer.ID, req.Nonce, time.UnixMilli(req.ExpiresAtMS), now); err != nil {
		return s.refuse(resp, peer.ID, CodeReplay, req.Role, "nonce seen or quota full")
	}
	state, code := s.demand(ctx, req.Role, peer.ID)
	if code != "" {
		return s.refuse(resp, peer.ID, code, req.Role, "the controller could not take the demand")
	}
	resp.State = state
	return resp
}

// serveLocal takes a demand of this node's own (its Holds, in memory):
// only the role must be on demand.
func (s *Server) serveLocal(ctx context.Context, role string) (string, error) {
	if code, msg := s.allowed(role, s.self); code != "" {
		s.met.served.WithLabelValues(string(code)).Inc()
		return "", &Refused{Code: code, Message: msg}
	}
	state, code := s.demand(ctx, role, s.self)
	if code != "" {
		return "", &Refused{Code: code, Message: "the controller could not take the demand"}
	}
	return state, nil
}

// allowed checks role against the controller's standbys: it must be one,
// and from must be on its DemandFrom or this node.
func (s *Server) allowed(role, from string) (Code, string) {
	for _, sb := range s.src.Standby() {
		if sb.Role != role {
			continue
		}
		if from == s.self || slices.Contains(sb.DemandFrom, from) {
			return "", ""
		}
		return CodeNotAllowed, "this node may not demand the role"
	}
	return CodeUnknownRole, "no on-demand workload serves the role"
}

// demand hands an allowed demand to the handler, at most one call in
// flight per role: a demand while one is in flight is answered starting.
func (s *Server) demand(ctx context.Context, role, from string) (string, Code) {
	s.mu.Lock()
	if s.inflight[role] {
		s.mu.Unlock()
		s.met.served.WithLabelValues("coalesced").Inc()
		return table.StateStarting, ""
	}
	s.inflight[role] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.inflight, role)
		s.mu.Unlock()
	}()
	state, err := s.h.Demand(ctx, role, from)
	if err != nil || !validState(state) {
		s.log.Warn("demand not taken", zap.String("role", role), zap.String("from", from),
			zap.String("state", state), zap.Error(err))
		s.met.served.WithLabelValues(string(CodeUnavailable)).Inc()
		return "", CodeUnavailable
	}
	s.met.served.WithLabelValues("ok").Inc()
	return state, ""
}

// take spends one of peer's tokens, reporting false when it has none.
func (s *Server) take(peer string) bool {
	now := s.window()
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.buckets[peer]
	if !ok {
		if len(s.buckets) >= MaxBuckets {
			s.pruneBucketsLocked(now)
		}
		if len(s.buckets) >= MaxBuckets {
			return false
		}
		b = &bucket{tokens: DemandBurst, last: now}
		s.buckets[peer] = b
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(DemandBurst, b.tokens+d.Seconds()*DemandRate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// pruneBucketsLocked drops the buckets that have refilled: forgetting them
// changes nothing. Call with mu held.
func (s *Server) pruneBucketsLocked(now time.Time) {
	for peer, b := range s.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*DemandRate >= DemandBurst {
			delete(s.buckets, peer)
		}
	}
}

// refuse fills resp as a refusal with code, counts it, logs it and hands
// it to the Recorder.
func (s *Server) refuse(resp Response, peer string, code Code, role, msg string) Response {
	resp.Code, resp.Message = code, truncate(msg, 256)
	s.met.served.WithLabelValues(string(code)).Inc()
	s.log.Debug("demand refused", zap.String("peer", peer), zap.String("code", string(code)), zap.String("reason", msg))
	if s.rec != nil {
		class := chain.ClassPeer
		if code == CodeSignature || code == CodePeerMismatch {
			class = chain.ClassSecurity
		}
		key := chain.RecordKey{Class: class, Sender: peer, Kind: KindRefused, Reason: string(code)}
		if _, err := s.rec.Record(key, AuditSource, RefusedEvent{Peer: peer, Code: code, Role: role}); err != nil {
			s.log.Error("chain record", zap.String("kind", KindRefused), zap.Error(err))
		}
	}
	return resp
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// validState reports whether s is an on-demand state.
func validState(s string) bool {
	switch s {
	case table.StateCold, table.StateStarting, table.StateReady, table.StateIdle:
		return true
	}
	return false
}
