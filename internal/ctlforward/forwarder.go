package ctlforward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/operator"
)

// Opener opens mesh streams; *mesh.Mesh is one.
type Opener interface {
	OpenStream(ctx context.Context, nodeID string, kind mesh.StreamKind) (*mesh.Stream, error)
}

var _ Opener = (*mesh.Mesh)(nil)

// Handlers registers a mesh stream handler; *mesh.Mesh is one.
type Handlers interface {
	Handle(kind mesh.StreamKind, h mesh.Handler)
}

// Backend serves a forwarded request on the leader
// (*operator.Router).
type Backend interface {
	OperateForwarded(ctx context.Context, from string, req operator.Request) operator.Response
}

var _ Backend = (*operator.Router)(nil)

// Config is the forwarder's configuration.
type Config struct {
	// Voters are the node ids of the controller voters (this node may be
	// listed): the only nodes whose forwarded requests are served. None:
	// the forwarder forwards nothing and serves nothing.
	Voters []string
}

// Deps are the forwarder's collaborators.
type Deps struct {
	// Mesh opens the streams to the leader and takes ServeStream; nil: a
	// node without a mesh, which forwards nothing.
	Mesh interface {
		Opener
		Handlers
	}
	// Self is this node's id.
	Self string
	// Logger is the daemon's logger; the forwarder names it "ctlforward".
	Logger *zap.Logger
	// Registerer receives nodeld_ctlforward_requests_total; nil: none.
	Registerer prometheus.Registerer
	// Backend returns what serves the forwarded requests (the operator
	// router, which is built after the forwarder: it is asked once the
	// mesh runs, never by New); nil: this node serves none.
	Backend func() Backend
}

// Forwarder is both sides of a forwarded controller write: Forward on a
// follower, ServeStream on the leader.
type Forwarder struct {
	voters  map[string]bool
	self    string
	mesh    Opener
	handles Handlers
	backend func() Backend // nil: streams are reset CodeNotServing
	log     *zap.Logger
	met     *prometheus.CounterVec
}

var _ operator.Forwarder = (*Forwarder)(nil)

// New makes a forwarder; it starts nothing. With voters, a mesh and a
// Backend it registers ServeStream for mesh.KindOperator on the mesh (call
// it before the mesh runs); otherwise a KindOperator stream finds no
// handler and is reset by the mesh.
func New(cfg Config, deps Deps) (*Forwarder, error) {
	f := &Forwarder{voters: map[string]bool{}, self: deps.Self, log: deps.Logger, backend: deps.Backend}
	for _, v := range cfg.Voters {
		if v == "" {
			return nil, errors.New("ctlforward: empty voter id")
		}
		f.voters[v] = true
	}
	if deps.Mesh != nil {
		f.mesh, f.handles = deps.Mesh, deps.Mesh
	}
	if f.log == nil {
		f.log = zap.NewNop()
	}
	f.log = f.log.Named("ctlforward")
	var err error
	if f.met, err = newMetrics(deps.Registerer); err != nil {
		return nil, fmt.Errorf("ctlforward: %w", err)
	}
	if f.handles != nil && len(f.voters) > 0 && f.backend != nil {
		f.handles.Handle(mesh.KindOperator, f.ServeStream)
	}
	return f, nil
}

// Forward sends req to the leader on a KindOperator stream and returns
// its answer. An error wraps operator.ErrForwardNotSent when the leader
// cannot have acted (no stream, or refused before it was read); any
// other error leaves the outcome unknown.
func (f *Forwarder) Forward(ctx context.Context, leader string, req operator.Request) (operator.Response, error) {
	resp, result, err := f.forward(ctx, leader, req)
	f.met.WithLabelValues(dirOut, result).Inc()
	if err != nil {
		f.log.Warn("forward to the leader failed", zap.String("leader", leader), zap.String("verb", req.Verb),
			zap.String("result", result), zap.Error(err))
	}
	return resp, err
}

func (f *Forwarder) forward(ctx context.Context, leader string, req operator.Request) (operator.Response, string, error) {
	notSent := func(format string, args ...any) (operator.Response, string, error) {
		return operator.Response{}, resultNotSent, fmt.Errorf("%w: %s", operator.ErrForwardNotSent, fmt.Sprintf(format, args...))
	}
	switch {
	case f.mesh == nil:
		return notSent("this node has no mesh")
	case !f.voters[leader] || leader == f.self:
		return notSent("%s is not another controller voter", leader)
	}
	wire, err := json.Marshal(req)
	if err != nil || len(wire) > MaxRequestBytes {
		return notSent("request not encodable within %d bytes", MaxRequestBytes)
	}
	wait := CallWait
	if req.Verb == operator.VerbPlace {
		wait = PlaceWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	st, err := f.mesh.OpenStream(ctx, leader, mesh.KindOperator)
	if err != nil {
		return notSent("open a stream to %s: %v", leader, err)
	}
	stop, err := st.Request(ctx, FrameRequest, wire)
	defer stop()
	if err != nil {
		return notSent("send to %s: %v", leader, err)
	}
	typ, out, err := mesh.ReadFrame(st, MaxResponseBytes)
	if code, ok := mesh.ResetCode(err); ok {
		switch code {
		case CodeNotVoter, CodeNotServing, mesh.StreamCodeNoHandler:
			return notSent("%s refused the forwarded request (stream code %#x: it takes them from its controller voters only)", leader, uint64(code))
		case CodeMalformed:
			return notSent("%s could not read the forwarded request (stream code %#x)", leader, uint64(code))
		}
	}
	if err != nil || typ != FrameResponse {
		st.Reset(mesh.StreamCodeCancelled)
		return operator.Response{}, resultLost, fmt.Errorf("read the answer of %s: type %d: %v", leader, typ, err)
	}
	st.StopReading(mesh.StreamCodeCancelled)
	resp, err := decodeResponse(out)
	if err != nil {
		return operator.Response{}, resultLost, err
	}
	return resp, resultAnswered, nil
}

// ServeStream is the mesh handler of KindOperator: one request frame from
// a controller voter, one answer. Any other peer's stream is reset
// CodeNotVoter before a byte is read; a malformed or oversized request is
// reset CodeMalformed; neither reaches the backend.
func (f *Forwarder) ServeStream(ctx context.Context, peer mesh.PeerInfo, st *mesh.Stream) {
	if f.backend == nil {
		f.met.WithLabelValues(dirIn, resultNotServing).Inc()
		st.Reset(CodeNotServing)
		return
	}
	if !f.voters[peer.ID] || peer.ID == f.self {
		f.met.WithLabelValues(dirIn, resultNotVoter).Inc()
		f.log.Warn("forwarded operator request refused: not a controller voter", zap.String("peer", peer.ID))
		st.Reset(CodeNotVoter)
		return
	}
	_ = st.SetReadDeadline(time.Now().Add(RequestReadTimeout))
	typ, wire, err := mesh.ReadFrame(st, MaxRequestBytes)
	var req operator.Request
	if err == nil && typ != FrameRequest {
		err = fmt.Errorf("frame type %d", typ)
	}
	if err == nil {
		req, err = decodeRequest(wire)
	}
	if err != nil {
		// Counted before the reset, which is what the peer sees: a count
		// read after the peer's error holds it.
		f.met.WithLabelValues(dirIn, resultMalformed).Inc()
		f.log.Warn("forwarded operator request malformed", zap.String("peer", peer.ID), zap.Error(err))
		st.Reset(CodeMalformed)
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	wait := CallWait
	if req.Verb == operator.VerbPlace {
		wait = PlaceWait
	}
	octx, cancel := context.WithTimeout(ctx, wait)
	resp := f.backend().OperateForwarded(octx, peer.ID, req)
	cancel()
	_ = st.SetWriteDeadline(time.Now().Add(ResponseWriteTimeout))
	if err := mesh.WriteFrame(st, FrameResponse, encodeResponse(resp)); err != nil {
		st.Reset(mesh.StreamCodeCancelled)
		f.met.WithLabelValues(dirIn, resultUnanswered).Inc()
		f.log.Warn("forwarded operator request: answer not sent", zap.String("peer", peer.ID), zap.String("verb", req.Verb), zap.Error(err))
		return
	}
	_ = st.Close()
	f.met.WithLabelValues(dirIn, resultServed).Inc()
}

// sortedVoters lists the voters, for logs and tests.
func (f *Forwarder) sortedVoters() []string {
	out := make([]string, 0, len(f.voters))
	for v := range f.voters {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
