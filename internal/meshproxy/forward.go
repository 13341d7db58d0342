package meshproxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/reload"
	"github.com/nodeld/nodeld/internal/table"
	"github.com/nodeld/nodeld/internal/tlspool"
)

// MeshStreams opens streams to peers; *mesh.Mesh implements it.
type MeshStreams interface {
	OpenStream(ctx context.Context, nodeID string, kind mesh.StreamKind) (*mesh.Stream, error)
}

// MeshTable is the serving side's view of the placement table;
// *table.Table implements it.
type MeshTable interface {
	// LocalForPeerHeld returns the local instance role serves to peer
	// with a Hold of its registration, given back once the request is
	// answered, so that a stop of the instance drains it first.
	LocalForPeerHeld(role, peer string) (table.MeshLocal, table.Hold, bool)
}

// exposedRoles is implemented by tables that say which roles they expose
// (*table.Table does); peer-sent role names become metric labels only when
// they are exposed.
type exposedRoles interface {
	RoleExposed(role string) bool
}

// Recorder chains events that a remote party can trigger, counting the
// repeats of a key instead of chaining each (*chain.Recorder).
type Recorder interface {
	Record(key chain.RecordKey, source string, payload any) (chained bool, err error)
}

var (
	_ Recorder              = (*chain.Recorder)(nil)
	_ MeshStreams           = (*mesh.Mesh)(nil)
	_ MeshTable             = (*table.Table)(nil)
	_ exposedRoles          = (*table.Table)(nil)
	_ proxy.RemoteForwarder = (*Forwarder)(nil)
)

// AuditSource is the source of the proxy's audit records.
const AuditSource = "proxy"

// AuditKindMeshRefused is recorded when this node refuses a peer's
// forwarded request (payload MeshRefusedEvent).
const AuditKindMeshRefused = "infer.mesh.refused"

// MeshRefusedEvent is the payload of AuditKindMeshRefused.
type MeshRefusedEvent struct {
	Peer string `json:"peer"`
	Role string `json:"role,omitempty"`
	Code string `json:"code"`
}

// Deps are a Forwarder's collaborators and limits.
type Deps struct {
	// Mesh opens streams to peers (consumer side); required.
	Mesh MeshStreams
	// Table decides what a peer may reach (serving side); required.
	Table MeshTable
	// Recorder records refusals of peers' requests, keyed by peer and
	// refusal code: a peer sends as many requests as it likes. Nil
	// disables.
	Recorder Recorder
	// Logger may be nil (no logs).
	Logger *zap.Logger
	// Registerer may be nil (metrics kept, not exported).
	Registerer prometheus.Registerer
	// Transport reaches local instances for peers' requests; nil means
	// the forwarder's own clients: the pooled HTTP/1.1 client of the local
	// path for requests with a held body (or none), a transport of the
	// package's shared tuning for streamed bodies.
	Transport http.RoundTripper
	// MaxInflightPerPeer and MaxInflightTotal bound the requests served
	// to peers at once (0: the defaults).
	MaxInflightPerPeer, MaxInflightTotal int
	// MaxBodyBytes bounds a request body over the mesh, on both sides
	// (0: DefaultMeshMaxBodyBytes).
	MaxBodyBytes int64
	// TCP chooses the transport of inference streams; with TransportTCP,
	// Mesh must also be a MeshPeers and Identity is required.
	TCP TCP
	// Identity is this node's key, for inference over TLS/TCP.
	Identity *identity.Identity

	// serveTimeout replaces MeshServeTimeout (tests).
	serveTimeout time.Duration
}

// Forwarder carries inference requests over the mesh: as a consumer
// (ForwardRemote, the proxy's RemoteForwarder) and as a serving node
// (ServeStream, the mesh's KindInfer handler).
type Forwarder struct {
	log       *zap.Logger
	streams   MeshStreams
	table     MeshTable
	rec       Recorder
	transport http.RoundTripper
	ownTrans  *http.Transport // set when the forwarder built transport
	// pool is the pooled HTTP/1.1 client of requests with a held body or
	// none, set when the forwarder built its transport (httpfast.Pool).
	pool    *httpfast.Pool
	upAddrs upstreamAddrs // local instances' addresses, for pool
	// serveTimeout caps a served request: MeshServeTimeout but in tests.
	serveTimeout time.Duration
	met          *meshMetrics
	bufs         *framePools // frames read or written at once
	tcp          *tcpSide    // nil: inference over QUIC only

	// held and peakHeld are the request body bytes held in memory by the
	// forwards in flight, both sides (nodeld_proxy_mesh_body_bytes), and
	// the most they reached.
	held, peakHeld atomic.Int64

	perPeer atomic.Int64
	total   atomic.Int64
	maxBody atomic.Int64

	mu       sync.Mutex // guards inflight and byPeer
	inflight int
	byPeer   map[string]int
}

// NewForwarder validates d and builds a forwarder; it starts nothing.
func NewForwarder(d Deps) (*Forwarder, error) {
	if d.Mesh == nil || d.Table == nil {
		return nil, errors.New("proxy: mesh forwarder needs Mesh and Table")
	}
	met, err := newMeshMetrics(d.Registerer)
	if err != nil {
		return nil, err
	}
	lg := d.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	f := &Forwarder{
		log:          lg,
		streams:      d.Mesh,
		table:        d.Table,
		rec:          d.Recorder,
		transport:    d.Transport,
		met:          met,
		byPeer:       make(map[string]int),
		serveTimeout: cmp.Or(d.serveTimeout, MeshServeTimeout),
		bufs:         newFramePools(),
	}
	if f.transport == nil {
		f.ownTrans = httpfast.NewTransport(DefaultMeshMaxInflightTotal)
		f.transport = f.ownTrans
		f.pool = httpfast.NewPool(nil)
	}
	if err := f.SetLimits(d.MaxInflightPerPeer, d.MaxInflightTotal, d.MaxBodyBytes); err != nil {
		return nil, err
	}
	if f.tcp, err = newTCPSide(d.TCP, d, lg); err != nil {
		return nil, err
	}
	if f.tcp != nil && d.Registerer != nil {
		if err := d.Registerer.Register(newTCPCollector(f.tcp)); err != nil {
			return nil, fmt.Errorf("register proxy mesh tcp metrics: %w", err)
		}
	}
	return f, nil
}

// SetLimits applies new slot counts and body limit (0: the defaults) to
// requests that arrive from now on; requests in flight keep their slots.
// On error nothing changes.
func (f *Forwarder) SetLimits(perPeer, total int, maxBody int64) error {
	p, err := f.Prepare(Limits{PerPeer: perPeer, Total: total, MaxBody: maxBody})
	if err != nil {
		return err
	}
	p.Commit()
	return nil
}

// Limits are a forwarder's slot counts and body limit (0: the defaults),
// what a reload changes.
type Limits struct {
	PerPeer, Total int
	MaxBody        int64
}

// Prepare checks new limits (CheckLimits) and returns the change that
// applies them, as SetLimits would (the reload contract, internal/reload);
// it changes nothing itself. The commit cannot fail.
func (f *Forwarder) Prepare(l Limits) (reload.Prepared, error) {
	if err := CheckLimits(l.PerPeer, l.Total, l.MaxBody); err != nil {
		return nil, err
	}
	perPeer, total, maxBody := meshLimitDefaults(l.PerPeer, l.Total, l.MaxBody)
	return reload.Commit(func() {
		f.perPeer.Store(int64(perPeer))
		f.total.Store(int64(total))
		f.maxBody.Store(maxBody)
	}), nil
}

// CheckLimits reports every problem of a forwarder's limits (0: the
// defaults) at once, without a forwarder: slot counts within
// 0..MaxMeshInflight, the body limit within 0..MaxBodyBytesLimit.
func CheckLimits(perPeer, total int, maxBody int64) error {
	perPeer, total, maxBody = meshLimitDefaults(perPeer, total, maxBody)
	var errs []error
	if perPeer < 0 || perPeer > MaxMeshInflight {
		errs = append(errs, fmt.Errorf("mesh max in-flight per peer %d: want 0..%d", perPeer, MaxMeshInflight))
	}
	if total < 0 || total > MaxMeshInflight {
		errs = append(errs, fmt.Errorf("mesh max in-flight total %d: want 0..%d", total, MaxMeshInflight))
	}
	if maxBody < 0 || maxBody > proxy.MaxBodyBytesLimit {
		errs = append(errs, fmt.Errorf("mesh max body bytes %d: want 0..%d", maxBody, proxy.MaxBodyBytesLimit))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}

func meshLimitDefaults(perPeer, total int, maxBody int64) (int, int, int64) {
	if perPeer == 0 {
		perPeer = DefaultMeshMaxInflightPerPeer
	}
	if total == 0 {
		total = DefaultMeshMaxInflightTotal
	}
	if maxBody == 0 {
		maxBody = proxy.DefaultMeshMaxBodyBytes
	}
	return perPeer, total, maxBody
}

// holdBody counts n more (or, negative, fewer) request body bytes held in
// memory.
func (f *Forwarder) holdBody(n int64) {
	v := f.held.Add(n)
	f.met.bodyBytes.Set(float64(v))
	for {
		p := f.peakHeld.Load()
		if v <= p || f.peakHeld.CompareAndSwap(p, v) {
			return
		}
	}
}

// Inflight returns the peers' requests being served now and the total
// slot count.
func (f *Forwarder) Inflight() (inflight, capacity int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight, int(f.total.Load())
}

// CloseIdleConnections closes idle upstream connections of the
// forwarder's own transport (call it on shutdown).
func (f *Forwarder) CloseIdleConnections() {
	if f.ownTrans != nil {
		f.ownTrans.CloseIdleConnections()
	}
	if f.pool != nil {
		f.pool.CloseIdle()
	}
	if f.tcp != nil {
		f.tcp.pool.CloseIdle()
	}
}

// Error codes of the consumer side.
const (
	// CodePeerRefused: the peer does not serve the role to this node (or
	// refused for a reason it does not share).
	CodePeerRefused = "peer_refused"
	// CodePeerBadRequest: the peer found the request malformed.
	CodePeerBadRequest = "bad_request"
	// CodePeerUnreachable: there is no mesh link to the peer.
	CodePeerUnreachable = "peer_unreachable"
)

// refusalStatus maps a peer's refusal code to what the client is told.
var refusalStatus = map[string]proxy.Error{
	"":                    {Status: http.StatusBadGateway, Type: proxy.TypeUpstream, Code: CodePeerRefused, Message: "mesh: the peer refused the request"},
	RefuseNotServed:       {Status: http.StatusBadGateway, Type: proxy.TypeUpstream, Code: CodePeerRefused, Message: "mesh: the peer does not serve this role to this node"},
	RefuseBadRequest:      {Status: http.StatusBadRequest, Type: proxy.TypeInvalidRequest, Code: CodePeerBadRequest, Message: "bad request: the peer refused the request body or head"},
	RefuseForbiddenPath:   {Status: http.StatusForbidden, Type: proxy.TypePermission, Code: proxy.CodeForbiddenPath, Message: "forbidden: the peer does not serve this path"},
	RefuseTooLarge:        {Status: http.StatusRequestEntityTooLarge, Type: proxy.TypeInvalidRequest, Code: proxy.CodeBodyTooLarge, Message: "request body over the peer's mesh limit"},
	RefuseOverCapacity:    {Status: http.StatusTooManyRequests, Type: proxy.TypeRateLimit, Code: proxy.CodeOverCapacity, Message: "the peer is serving as many requests as it allows; retry later"},
	RefuseUpstreamDown:    {Status: http.StatusBadGateway, Type: proxy.TypeUpstream, Code: proxy.CodeUpstreamDown, Message: "upstream: the peer's instance is unreachable"},
	RefuseUpstreamError:   {Status: http.StatusBadGateway, Type: proxy.TypeUpstream, Code: proxy.CodeUpstreamError, Message: "upstream: the peer's instance failed to answer"},
	RefuseUpstreamTimeout: {Status: http.StatusGatewayTimeout, Type: proxy.TypeTimeout, Code: proxy.CodeUpstreamTimeout, Message: "timeout: the peer's instance took too long"},
}

// Consumer-side outcomes, the result label of
// nodeld_proxy_mesh_forwarded_total.
const (
	fwdOK        = "ok"
	fwdTooLarge  = "too_large"
	fwdBadPath   = "bad_path"
	fwdNoLink    = "no_link"
	fwdRefused   = "refused"
	fwdMalformed = "malformed"
	fwdCancelled = "cancelled"
	fwdError     = "error"
	// fwdResent is a held request's first attempt on a pooled connection
	// the peer had closed (errStaleConn): it is sent again, and the second
	// attempt is counted by its own outcome.
	fwdResent = "resent"
)

// ForwardRemote sends r to nodeID over one KindInfer stream and relays
// the response to w as it arrives. It makes one attempt and never retries
// or reroutes: a failure before the peer answered wraps
// proxy.ErrNotAnswered (a refusal for the peer's in-flight limit,
// proxy.ErrPeerBusy), and the proxy's routing loop, the one owner of a
// forward's retry, decides whether to try again and where. The body is body when the caller holds
// it (it may then call again with it, on another peer); with body nil,
// r.Body (r.ContentLength bytes, -1 unknown) is streamed to the peer as it
// is read, in chunks of at most MeshChunkBytes, and a failure reading it
// is a *ClientBodyError. Only Content-Type and Accept cross the mesh;
// Authorization and cookies never do. A body over the mesh limit or a
// path not served to peers is refused before any stream is opened. When
// ctx ends the stream is reset, and the serving node cancels its upstream
// request.
//
// The one exception is below the exchange, not above it: a held request
// sent on a pooled connection that its peer had closed a moment before
// (tlspool.Conn.Unchecked: a restart's) fails before anything of the
// answer came; it is sent once more, on a new connection (errStaleConn).
func (f *Forwarder) ForwardRemote(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter) error {
	err := f.forwardOnce(ctx, nodeID, role, r, body, w, false)
	if err == errStaleConn {
		err = f.forwardOnce(ctx, nodeID, role, r, body, w, true)
	}
	return err
}

// errStaleConn is forwardOnce's failure on a pooled connection its peer
// had closed before the request was sent: nothing of the answer came, and
// the request, held, is sent again (ForwardRemote). Its message is what
// an error from the second attempt never shows.
var errStaleConn = fmt.Errorf("%w: the pooled connection was closed by the peer", proxy.ErrNotAnswered)

// forwardOnce is ForwardRemote's one attempt; resent says it is the
// second, after errStaleConn, which it then never returns.
func (f *Forwarder) forwardOnce(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter, resent bool) error {
	streamed := body == nil && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
	size := int64(len(body))
	if streamed {
		size = r.ContentLength
	}
	limit := f.maxBody.Load()
	if size > limit {
		f.met.forwarded(fwdTooLarge)
		return proxy.TooLargeError(limit)
	}
	if !proxy.IsMeshPath(r.URL.Path) || !validQuery(r.URL.RawQuery) || (r.Method != http.MethodGet && r.Method != http.MethodPost) {
		f.met.forwarded(fwdBadPath)
		return &proxy.Error{Status: http.StatusNotFound, Type: proxy.TypeNotFound, Code: proxy.CodeLocalOnly,
			Message: "role '" + role + "' is served by a peer, which is not asked for " + r.URL.Path}
	}
	head := meshRequestHead{V: MeshWireVersion, Role: role, Method: r.Method, Path: r.URL.Path,
		Query: r.URL.RawQuery, BodyBytes: size}
	if v := httpfast.Value(r.Header, "Content-Type"); validHeaderValue(v) {
		head.ContentType = v
	}
	if v := httpfast.Value(r.Header, "Accept"); validHeaderValue(v) {
		head.Accept = v
	}
	var s inferStream
	var tc *tlspool.Conn // the connection s is on, when over TCP
	reuse := false       // tc may serve another exchange
	if f.tcp != nil {
		var why string
		if tc, why = f.tcp.conn(ctx, nodeID, streamed); why != "" {
			f.met.fallbacks.WithLabelValues(why).Inc()
		}
	}
	if tc != nil {
		s = &tcpClientStream{c: tc}
		f.met.transport(sideForward, TransportTCP)
	} else {
		qs, err := f.streams.OpenStream(ctx, nodeID, mesh.KindInfer)
		if err != nil {
			if ctx.Err() != nil {
				f.met.forwarded(fwdCancelled)
				return httpfast.Cause(ctx)
			}
			f.met.forwarded(fwdNoLink)
			return fmt.Errorf("%w (%w: %w)", &proxy.Error{Status: http.StatusBadGateway, Type: proxy.TypeUpstream, Code: CodePeerUnreachable,
				Message: "mesh: the peer serving role '" + role + "' is unreachable"}, proxy.ErrNotAnswered, err)
		}
		s = qs
		f.met.transport(sideForward, TransportQUIC)
	}
	watch := watchReset(ctx, s)
	// A small buffer when the request fits it with its head (a chat
	// request, most often): a thousand streams opened at once then take no
	// large buffer each while they wait for their answers' heads. Else a
	// large one, kept for the answer unless it is an event stream.
	// relayResponse grows a small one when a frame needs it, and shrinks a
	// large one once an event stream's head is relayed.
	fb := f.bufs.bufFor(streamed, len(body))
	buf := fb.bytes()
	held := int64(len(body))
	if streamed {
		held = int64(cap(buf))
	}
	f.holdBody(held)
	// One deferred call, so that it is open-coded (a chain of them through
	// this many returns costs the runtime's defer records a request).
	defer func() {
		f.holdBody(-held)
		fb.release()
		if tc == nil {
			watch.stop()
			return
		}
		// After stop: a connection goes back to the pool only when the
		// exchange was read to its end and nothing aborted it.
		if reuse && watch.stop() && !s.(*tcpClientStream).broken.Load() {
			f.tcp.pool.Put(tc)
		} else {
			tc.Abort()
		}
	}()
	var werr error
	if streamed {
		var berr error
		werr, berr = sendStreamed(s, head, r.Body, limit, buf)
		if berr != nil {
			// The client's body failed (gone, too slow, too long): the
			// peer must not answer a request it did not get whole.
			s.Reset(mesh.StreamCodeCancelled)
			var mbe *http.MaxBytesError
			if errors.As(berr, &mbe) {
				f.met.forwarded(fwdTooLarge)
			} else {
				f.met.forwarded(fwdCancelled)
			}
			return &proxy.ClientBodyError{Err: berr}
		}
	} else if ts, ok := s.(*tcpClientStream); ok {
		// On a connection, the wait for the answer begins in the window
		// the request is written in (httpfast.SendAwait).
		ts.held = heldRequest{head: head, body: body, buf: buf}
		werr = httpfast.SendAwait(tc.NetConn(), ts)
		ts.held = heldRequest{}
	} else {
		werr = sendRequest(s, head, body, buf)
	}
	// Read even after a failed send: a serving node that refuses early
	// stops reading the body and answers with a refusal.
	err := relayResponse(s, w, &fb)
	if err == nil {
		s.FinishReading(MeshFinishWait) // nothing more is expected
		f.met.forwarded(fwdOK)
		// On a connection the end frame says whether it serves again.
		reuse = tc != nil && werr == nil && s.(*tcpClientStream).kept
		return nil
	}
	if ts, ok := s.(*tcpClientStream); ok && !resent && !streamed && stale(ctx, ts) {
		f.tcp.pool.Stale(tc) // and the peer's other idle connections
		f.met.forwarded(fwdResent)
		return errStaleConn
	}
	return f.forwardFailed(ctx, s, nodeID, role, err, werr, streamed, size, &reuse)
}

// stale reports whether s failed as an exchange on a pooled connection
// its peer had closed before: handed out unchecked, ended under the
// exchange (closed, reset) with nothing of the answer read.
func stale(ctx context.Context, s *tcpClientStream) bool {
	return ctx.Err() == nil && s.c.Unchecked() && s.ioErr.Load() && !s.got
}

// forwardFailed ends a forward whose answer was not relayed whole (err
// from relayResponse, werr from sending): it stops the stream, counts the
// outcome, says through reuse whether the connection serves again, and
// returns the error for the proxy.
func (f *Forwarder) forwardFailed(ctx context.Context, s inferStream, nodeID, role string, err, werr error, streamed bool, size int64, reuse *bool) error {
	s.StopReading(mesh.StreamCodeCancelled) // nothing more is wanted
	var ref *peerRefusal
	switch {
	case ctx.Err() != nil:
		s.AbortWrite(mesh.StreamCodeCancelled)
		f.met.forwarded(fwdCancelled)
		return httpfast.Cause(ctx)
	case errors.As(err, &ref):
		f.met.forwarded(fwdRefused)
		*reuse = !ref.afterHead && reusable(streamed, size, werr)
		if ref.afterHead {
			return fmt.Errorf("peer %s failed midway: %w", nodeID, err)
		}
		e := refusalStatus[ref.code]
		switch ref.code {
		case RefuseNotServed:
			e.Message = "mesh: the peer does not serve role '" + role + "' to this node"
			return fmt.Errorf("%w (%w)", &e, proxy.ErrPeerNotServing)
		case RefuseOverCapacity:
			// Refused with the head: the peer took nothing of the request.
			return fmt.Errorf("%w (%w)", &e, proxy.ErrPeerBusy)
		}
		return &e
	case connFailed(s):
		// The connection ended under the exchange (the peer died, its
		// link was lost, it stopped): as a QUIC link failure.
		f.met.forwarded(fwdError)
		return fmt.Errorf("%w: peer %s: tcp: %w", proxy.ErrNotAnswered, nodeID, err)
	case errors.Is(err, errMalformedFrames):
		s.AbortWrite(mesh.StreamCodeMalformed)
		f.met.forwarded(fwdMalformed)
		return fmt.Errorf("peer %s: %w", nodeID, err)
	default:
		s.AbortWrite(mesh.StreamCodeCancelled)
		f.met.forwarded(fwdError)
		if mesh.LinkFailed(err) {
			// The link died (a dead or frozen peer is cut by the mesh's
			// liveness check) before the peer chose to answer or refuse:
			// another node may serve the request if nothing was relayed.
			err = fmt.Errorf("%w: %w", proxy.ErrNotAnswered, err)
		}
		if werr != nil {
			return fmt.Errorf("send to peer %s: %w", nodeID, werr)
		}
		return fmt.Errorf("read from peer %s: %w", nodeID, err)
	}
}

// resetWatch resets a forward's stream when its context ends
// (watchReset) until stop.
type resetWatch struct {
	ec   *httpfast.Context // the fast reader's exchange context, s registered
	id   uint64
	done func() bool // context.AfterFunc's stop, on any other context
}

// watchReset resets s when ctx ends. On the fast reader's exchange
// context the stream itself is registered (httpfast.Context.Register):
// no closure and no stop function are made a request.
func watchReset(ctx context.Context, s inferStream) resetWatch {
	if ec, ok := ctx.(*httpfast.Context); ok {
		switch st := s.(type) {
		case *tcpClientStream:
			return resetWatch{ec: ec, id: ec.Register(st)}
		case *mesh.Stream:
			return resetWatch{ec: ec, id: ec.Register((*quicReset)(st))}
		}
	}
	return resetWatch{done: context.AfterFunc(ctx, func() { s.Reset(mesh.StreamCodeCancelled) })}
}

// stop ends the watch and reports whether it did so before the reset
// was started, as context.AfterFunc's stop.
func (w resetWatch) stop() bool {
	if w.done != nil {
		return w.done()
	}
	return w.ec.Unregister(w.id)
}

// quicReset is a QUIC stream reset when its forward's context ends.
type quicReset mesh.Stream

func (q *quicReset) ContextDone() { (*mesh.Stream)(q).Reset(mesh.StreamCodeCancelled) }

// reusable reports whether a connection serves another exchange after
// one that ended with its end frame or a refusal: only when the request
// was sent whole and held, and small enough that the serving node read it
// whole before answering (or, refusing first, reads it to its end:
// refuseHead), so that nothing of it is left on the connection.
func reusable(streamed bool, size int64, werr error) bool {
	return !streamed && werr == nil && size <= proxy.MeshBufferedBodyBytes
}

// sendRequest writes the head, the body frames and the end frame, then
// closes the write side. A body that fits buf with its head leaves in one
// write (and so, usually, in one packet).
func sendRequest(s inferStream, head meshRequestHead, body []byte, buf []byte) error {
	w := appendRequestHeadFrame(buf[:0], head)
	for {
		n := min(len(body), MeshChunkBytes, cap(w)-len(w)-2*mesh.FrameHeaderSize)
		if n > 0 {
			w = append(mesh.AppendFrameHeader(w, frameReqBody, n), body[:n]...)
			body = body[n:]
		}
		if len(body) == 0 {
			w = mesh.AppendFrameHeader(w, frameReqEnd, 0)
			break
		}
		if _, err := s.Write(w); err != nil {
			return err
		}
		w = w[:0]
	}
	if _, err := s.Write(w); err != nil {
		return err
	}
	return s.CloseWrite()
}

// sendStreamed writes the head, then each read of body as a frame as it
// comes (the head with the first one), then the end frame, and closes the
// write side. werr is a failure to write to the peer (it may have refused
// and stopped reading); berr a failure to read body, or body over limit
// (an *http.MaxBytesError) or shorter than head announced.
func sendStreamed(s inferStream, head meshRequestHead, body io.Reader, limit int64, buf []byte) (werr, berr error) {
	w := appendRequestHeadFrame(buf[:0], head)
	var sent int64
	for {
		at := len(w)
		room := min(MeshChunkBytes, cap(w)-at-2*mesh.FrameHeaderSize)
		// Whole frames: fewer, larger writes to the stream.
		n, rerr := io.ReadFull(body, w[at+mesh.FrameHeaderSize:at+mesh.FrameHeaderSize+room])
		if rerr == io.ErrUnexpectedEOF {
			rerr = io.EOF
		}
		if n > 0 {
			switch sent += int64(n); {
			case sent > limit:
				return nil, &http.MaxBytesError{Limit: limit}
			case head.BodyBytes >= 0 && sent > head.BodyBytes:
				return nil, errors.New("body longer than its announced length")
			}
			w = mesh.AppendFrameHeader(w, frameReqBody, n)
			w = w[:at+mesh.FrameHeaderSize+n]
		}
		if rerr == io.EOF {
			if head.BodyBytes >= 0 && sent != head.BodyBytes {
				return nil, io.ErrUnexpectedEOF
			}
			w = mesh.AppendFrameHeader(w, frameReqEnd, 0)
			if _, err := s.Write(w); err != nil {
				return err, nil
			}
			return s.CloseWrite(), nil
		}
		if rerr != nil {
			return nil, rerr
		}
		if len(w) > 0 {
			if _, err := s.Write(w); err != nil {
				return err, nil
			}
			w = w[:0]
		}
	}
}

// meshMetrics are the forwarder's collectors. Labels are bounded: role is
// a role this node exposes (else "unknown"), code a refusal code or one of
// a few outcomes, result one of the fwd* values.
type meshMetrics struct {
	served    *prometheus.CounterVec // role, code
	inflight  prometheus.Gauge
	forwardsV *prometheus.CounterVec // result
	bodyBytes prometheus.Gauge
	// transports counts exchanges by side and transport; fallbacks the
	// forwards that went over QUIC while the transport is TCP, by reason.
	transports *prometheus.CounterVec // side, transport
	fallbacks  *prometheus.CounterVec // reason

	// resolved holds the counters resolved so far (resolvedCounter) by
	// forwarded (keyed by result) and serve ([3]string{"served", role,
	// code}), for outcomes other than ok: bounded by the few values they
	// count.
	resolved sync.Map
	// transportC holds transport's four counters once resolved, by
	// transportIndex: an array index, where a key of resolved is hashed.
	transportC [4]atomic.Value // prometheus.Counter
	// forwardedOK is forwarded's counter of fwdOK once resolved, and
	// servedOK holds serve's of servedOK by role label: the outcome of
	// most requests, counted without hashing a key (forwardedOK) or
	// with one string's hash, not an array's through an interface
	// (servedOK).
	forwardedOK atomic.Value // prometheus.Counter
	servedOK    sync.Map     // role label -> prometheus.Counter
}

func newMeshMetrics(reg prometheus.Registerer) (*meshMetrics, error) {
	m := &meshMetrics{
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_proxy_mesh_served_total",
			Help: "Inference requests from mesh peers by role and outcome code (ok or the refusal or failure code).",
		}, []string{"role", "code"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_proxy_mesh_inflight",
			Help: "Inference requests from mesh peers being served now.",
		}),
		forwardsV: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_proxy_mesh_forwarded_total",
			Help: "Inference requests this node forwarded to peers, by result.",
		}, []string{"result"}),
		bodyBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_proxy_mesh_body_bytes",
			Help: "Request body bytes held in memory by mesh forwards in flight, sent and served: small bodies whole, streamed ones a fixed buffer each.",
		}),
	}
	m.transports = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeld_proxy_mesh_transport_total",
		Help: "Inference exchanges over the mesh by side (forward: sent to a peer; serve: served to one) and transport (tcp or quic).",
	}, []string{"side", "transport"})
	m.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeld_proxy_mesh_tcp_fallbacks_total",
		Help: "Inference forwards sent over QUIC while mesh.infer_transport is tcp, by reason (dial, dialing, down, no_link, pool_full).",
	}, []string{"reason"})
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.served, m.inflight, m.forwardsV, m.bodyBytes, m.transports, m.fallbacks} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register proxy mesh metrics: %w", err)
		}
	}
	return m, nil
}

// resolvedCounter returns the counter resolved for key by the first
// count under it, so that a request after it pays no label hashing (key
// is generic so that a lookup converts it to an interface without
// allocating: only the first Store's copy escapes).
func resolvedCounter[K comparable](m *sync.Map, key K, resolve func(K) prometheus.Counter) prometheus.Counter {
	if c, ok := m.Load(key); ok {
		return c.(prometheus.Counter)
	}
	c := resolve(key)
	m.Store(key, c)
	return c
}

// forwarded counts a forward by result.
func (m *meshMetrics) forwarded(result string) {
	if result == fwdOK {
		c, ok := m.forwardedOK.Load().(prometheus.Counter)
		if !ok {
			c = m.forwardsV.WithLabelValues(fwdOK)
			m.forwardedOK.Store(c)
		}
		c.Inc()
		return
	}
	resolvedCounter(&m.resolved, result, func(k string) prometheus.Counter {
		return m.forwardsV.WithLabelValues(k)
	}).Inc()
}

// serve counts an exchange served to a peer by role label and outcome
// code (both bounded: exposed roles, or unknownRole, and the codes).
func (m *meshMetrics) serve(role, code string) {
	if code == servedOK {
		resolvedCounter(&m.servedOK, role, func(k string) prometheus.Counter {
			return m.served.WithLabelValues(k, servedOK)
		}).Inc()
		return
	}
	resolvedCounter(&m.resolved, [3]string{"served", role, code}, func(k [3]string) prometheus.Counter {
		return m.served.WithLabelValues(k[1], k[2])
	}).Inc()
}

// transport counts an exchange by side (sideForward or sideServe) and
// transport (TransportTCP or TransportQUIC).
func (m *meshMetrics) transport(side, transport string) {
	v := &m.transportC[transportIndex(side, transport)]
	c, ok := v.Load().(prometheus.Counter)
	if !ok {
		c = m.transports.WithLabelValues(side, transport)
		v.Store(c)
	}
	c.Inc()
}

// transportIndex is the index in transportC of side and transport.
func transportIndex(side, transport string) int {
	i := 0
	if side == sideServe {
		i = 2
	}
	if transport == TransportQUIC {
		i++
	}
	return i
}
