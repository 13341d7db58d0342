package meshproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/modelpin"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/table"
)

// Serving-side outcome codes besides the refusal codes, for
// nodeld_proxy_mesh_served_total.
const (
	servedOK        = "ok"
	servedMalformed = "malformed" // broken framing: stream reset
	servedTimeout   = "timeout"   // the peer did not send in time: stream reset
	servedCancelled = "cancelled" // the peer went away or reset the stream
)

// unknownRole labels metrics for a role this node does not expose.
const unknownRole = "unknown"

// mlxRuntime is the runtime whose server would load whatever the model
// field names; its requests always name its default model.
const mlxRuntime = "mlx-lm"

// genericMessages are the only texts a refusal carries to a peer.
var genericMessages = map[string]string{
	RefuseNotServed:       "role not served to this peer here",
	RefuseBadRequest:      "request not accepted",
	RefuseForbiddenPath:   "path is not served to peers",
	RefuseTooLarge:        "request body over the mesh limit",
	RefuseOverCapacity:    "over capacity",
	RefuseUpstreamDown:    "upstream unavailable",
	RefuseUpstreamError:   "upstream error",
	RefuseUpstreamTimeout: "upstream timeout",
}

// ServeStream serves one KindInfer stream from peer (register it with
// m.Handle(mesh.KindInfer, f.ServeStream)). The peer's id is the one its
// link authenticated. It reads the head within MeshFirstFrameTimeout,
// checks it and LocalForPeer, takes a per-peer and a total slot, and
// forwards the request to the local instance only (never onward to another
// node) with its "model" pinned: a body of at most proxy.MeshBufferedBodyBytes is
// read whole and pinned first (modelpin.Pin); a larger one, or one of unknown
// length, is streamed to the instance as its frames arrive, pinned on the
// way (modelpin.Reader), so that what is held stays a chunk whatever the body's
// size. The response streams back chunk by chunk. Refusals carry a stable
// code and a generic message and are recorded (through the Recorder);
// broken framing resets the stream.
func (f *Forwarder) ServeStream(ctx context.Context, peer mesh.PeerInfo, s *mesh.Stream) {
	f.met.transport(sideServe, TransportQUIC)
	f.serveInfer(ctx, peer, s)
}

// serveInfer serves one KindInfer exchange on s, a QUIC stream or one
// exchange of a TLS connection (ServeStream's contract).
func (f *Forwarder) serveInfer(ctx context.Context, peer mesh.PeerInfo, s inferStream) {
	_ = s.SetReadDeadline(exchangeNow(s).Add(MeshFirstFrameTimeout))
	head, err := readRequestHead(s)
	if err != nil {
		f.readFailed(s, peer, "", err)
		return
	}
	// The hold keeps the registration from draining (a stop of its
	// instance waits) until the answer has been relayed.
	local, hold, ok := f.table.LocalForPeerHeld(head.Role, peer.ID)
	if !ok {
		f.refuseHead(s, peer, head, RefuseNotServed)
		return
	}
	// One deferred call, so that it is open-coded: what it undoes is
	// what was taken by the time of the return.
	acquired, held := false, int64(0)
	defer func() {
		if held != 0 {
			f.holdBody(-held)
		}
		if acquired {
			f.release(peer.ID)
		}
		hold.Done()
	}()
	if proxy.MeshPathRefusal(head.Path, local.Runtime) != "" {
		// An Ollama path for an instance that is not an Ollama (the
		// consumer's view of the advertisement was stale).
		f.refuseHead(s, peer, head, RefuseForbiddenPath)
		return
	}
	maxBody := f.maxBody.Load()
	if head.BodyBytes > maxBody {
		f.refuseHead(s, peer, head, RefuseTooLarge)
		return
	}
	if !f.acquire(peer.ID) {
		f.refuseHead(s, peer, head, RefuseOverCapacity)
		return
	}
	acquired = true
	var up upstreamBody
	switch {
	case head.BodyBytes >= 0 && head.BodyBytes <= proxy.MeshBufferedBodyBytes:
		body, err := readRequestBody(s, head, maxBody, s)
		if err != nil {
			f.readFailed(s, peer, head.Role, err)
			return
		}
		_ = s.SetReadDeadline(time.Time{})
		held = int64(len(body))
		f.holdBody(held)
		if head.Path == "/v1/models" {
			body = nil
		} else if body, err = modelpin.Pin(body, local.Model, local.Runtime); err != nil {
			f.refuse(s, peer, head.Role, RefuseBadRequest)
			return
		}
		up = upstreamBody{data: body, n: int64(len(body))}
	case head.Path == "/v1/models":
		// Nothing of a body is forwarded there: read it to its end.
		if _, err := io.Copy(io.Discard, &meshBodyReader{r: s, arm: s, announced: head.BodyBytes, limit: maxBody}); err != nil {
			f.readFailed(s, peer, head.Role, err)
			return
		}
		_ = s.SetReadDeadline(time.Time{})
	default:
		value, err := modelpin.Value(local.Model, local.Runtime)
		if err != nil {
			f.refuse(s, peer, head.Role, RefuseUpstreamError)
			return
		}
		src := &meshBodyReader{r: s, arm: s, announced: head.BodyBytes, limit: maxBody}
		pr := modelpin.NewReader(src, head.BodyBytes, value, MeshChunkBytes)
		held = pr.BufferedBytes()
		f.holdBody(held)
		up = upstreamBody{n: pr.Length(), stream: pr}
	}
	f.forward(ctx, s, peer, head, up, local)
}

// exchangeNow is the time for the deadline of s's head: on a connection,
// when its exchange began (tcpServerStream.begin), which read the clock a
// moment before serveInfer, with nothing read or waited for since; a
// clock read (some 70 ns) fewer an exchange.
func exchangeNow(s inferStream) time.Time {
	if ts, ok := s.(*tcpServerStream); ok && !ts.begun.IsZero() {
		return ts.begun
	}
	return time.Now()
}

// poolExchange holds what roundTrip builds for the instance pool, and
// what finishes its answer: one allocation for all of it.
type poolExchange struct {
	r    http.Request
	req  httpfast.Request
	f    *Forwarder
	uc   *httpfast.Conn
	res  *http.Response
	stop func() bool
}

// instanceAnswer is an instance's answer roundTrip returned: finish
// must be called once it is done with, clean when its body was read to
// the end. An interface over what the answer has anyway, not a closure
// made for each request.
type instanceAnswer interface{ finish(clean bool) }

// finish puts the connection back for the next request after a whole,
// clean exchange; else it closes it.
func (x *poolExchange) finish(clean bool) {
	if !x.stop() || !clean || x.res.Close {
		_ = x.uc.Close()
		return
	}
	x.f.pool.Put(x.uc, int(x.f.total.Load()))
}

// transportAnswer is an answer through net/http's Transport.
type transportAnswer http.Response

func (a *transportAnswer) finish(bool) { a.Body.Close() }

// servesWithin is a stream whose Context also ends MeshServeTimeout after
// the exchange began, with context.DeadlineExceeded, and when this node
// stops (tcpServerStream): forward then derives no context of its own.
type servesWithin interface{ servesWithin() }

// consumerGone reports whether s's context ended for its consumer going
// away (or this node stopping), not for the serve timeout.
func consumerGone(s inferStream) bool {
	err := s.Context().Err()
	if ec, ok := s.Context().(*httpfast.Context); ok {
		err = ec.Cause() // a TCP exchange's: its Err is always Canceled
	}
	return err != nil && !errors.Is(err, context.DeadlineExceeded)
}

// upstreamBody is the body of a request to the local instance: n bytes,
// either data (held in memory) or (-1: unknown, sent chunked) read from
// stream, a peer's body pinned as it arrives.
type upstreamBody struct {
	data   []byte
	n      int64
	stream *modelpin.Reader
}

// forward sends the request to the local instance and streams the answer.
func (f *Forwarder) forward(ctx context.Context, s inferStream, peer mesh.PeerInfo, head meshRequestHead, up upstreamBody, local table.MeshLocal) {
	serving := ctx // the mesh's: done when this node stops
	// What the one deferred call (open-coded, unlike a chain of them
	// through this many returns) undoes, as it is taken.
	var (
		cancel context.CancelFunc
		unhook func() bool
		finish instanceAnswer
		fb     *frameBuf
		clean  bool
	)
	defer func() {
		if fb != nil {
			fb.release()
		}
		if finish != nil {
			finish.finish(clean)
		}
		if cancel != nil {
			unhook()
			cancel()
		}
	}()
	if _, ok := s.(servesWithin); ok {
		// Its context is the exchange's whole life already.
		ctx = s.Context()
	} else {
		ctx, cancel = context.WithTimeout(ctx, f.serveTimeout)
		// The consumer resetting the stream (its client went away) cancels
		// the upstream request at once.
		unhook = context.AfterFunc(s.Context(), cancel)
	}
	res, fin, err := f.roundTrip(ctx, head, up, local)
	if up.stream != nil {
		// A streamed body that failed (broken frames, not an object, the
		// peer gone) is answered for what it is, whatever the instance
		// made of the truncated request it got.
		if ferr := up.stream.Failure(); ferr != nil {
			if err == nil {
				fin.finish(false)
			}
			f.bodyFailed(s, peer, head.Role, ferr)
			return
		}
	}
	if err != nil {
		switch {
		case consumerGone(s):
			f.reset(s, peer, head.Role, mesh.StreamCodeCancelled, servedCancelled, err)
		case serving.Err() != nil:
			// This node is stopping: the mesh cancels its handlers, then
			// closes the links. Answer nothing, so the consumer sees the
			// link close before any answer, not a refusal, and tries its
			// next candidate.
			f.met.serve(f.roleLabel(head.Role), servedCancelled)
			f.log.Debug("mesh infer left unanswered: stopping", zap.String("peer", peer.ID), zap.Error(err))
		case httpfast.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) ||
			errors.Is(httpfast.Cause(ctx), context.DeadlineExceeded):
			f.refuse(s, peer, head.Role, RefuseUpstreamTimeout)
		case httpfast.IsDialError(err):
			f.refuse(s, peer, head.Role, RefuseUpstreamDown)
		default:
			f.refuse(s, peer, head.Role, RefuseUpstreamError)
		}
		return
	}
	finish = fin
	if res.StatusCode < 200 || res.StatusCode > 599 {
		f.refuse(s, peer, head.Role, RefuseUpstreamError)
		return
	}
	large := f.bufs.largeBuf()
	fb = &large
	w, contentType := appendResponseHeadFrame(fb.bytes(), res.StatusCode, res.Header)
	// A stream's head goes at once (its first event may be long in
	// coming); any other head leaves with the first chunk of its body, and
	// a small answer with its end frame too: one write, one packet.
	if isStreamType(contentType) {
		if _, err := s.Write(w); err != nil {
			f.reset(s, peer, head.Role, mesh.StreamCodeCancelled, servedCancelled, err)
			return
		}
		// Its events are small and it may stay open long: a small buffer,
		// swapped for a large one when a read fills it.
		fb.shrink()
		w = fb.bytes()
	}
	for {
		// One frame per upstream read, read in place after its header:
		// an SSE event flushed by the instance crosses the mesh at once.
		// room leaves space for the end frame's header.
		at := len(w)
		room := min(MeshChunkBytes, cap(w)-at-2*mesh.FrameHeaderSize)
		n, rerr := res.Body.Read(w[at+mesh.FrameHeaderSize : at+mesh.FrameHeaderSize+room])
		if n > 0 {
			w = mesh.AppendFrameHeader(w, frameRespBody, n)
			w = w[:at+mesh.FrameHeaderSize+n]
		}
		if rerr == io.EOF {
			w = appendRespEnd(w, s)
			break
		}
		if rerr != nil {
			if len(w) > 0 {
				_, _ = s.Write(w) // what the instance sent before it failed
			}
			if consumerGone(s) {
				f.reset(s, peer, head.Role, mesh.StreamCodeCancelled, servedCancelled, rerr)
				return
			}
			f.log.Debug("upstream failed midway", zap.String("peer", peer.ID), zap.String("role", head.Role), zap.Error(rerr))
			f.refuse(s, peer, head.Role, RefuseUpstreamError)
			return
		}
		if len(w) > 0 {
			if _, err := s.Write(w); err != nil {
				f.reset(s, peer, head.Role, mesh.StreamCodeCancelled, servedCancelled, err)
				return
			}
			w = w[:0]
		}
		if n == room && fb.small {
			fb.grow() // the instance sends more than a small buffer holds
			w = fb.bytes()
		}
	}
	if _, err := writeLast(s, w); err != nil {
		f.reset(s, peer, head.Role, mesh.StreamCodeCancelled, servedCancelled, err)
		return
	}
	clean = true       // the whole answer was read: the connection may serve again
	_ = s.CloseWrite() // the peer has every byte or will see the stream reset
	if up.stream != nil && !up.stream.Complete() {
		// The instance answered before it read the whole body: the
		// transport may still be reading the stream for it.
		s.StopReading(mesh.StreamCodeCancelled)
	} else {
		s.FinishReading(MeshFinishWait)
	}
	f.met.serve(f.roleLabel(head.Role), servedOK)
}

// writeLast writes an answer's last bytes to s: on a connection, they may
// leave once the exchange ended (tcpServerStream.writeLast).
func writeLast(s inferStream, p []byte) (int, error) {
	if ts, ok := s.(*tcpServerStream); ok {
		return ts.writeLast(p)
	}
	return s.Write(p)
}

// roundTrip sends the request to the local instance and returns its
// answer's head, and the answer to finish once it is done with. A held
// body (or none) goes through the forwarder's pooled HTTP/1.1 client, the local path's
// (httpfast.Pool): head and body in one write, the answer read on this
// goroutine, the connection kept for the next request. A streamed body
// goes through net/http's Transport, which reads the answer while it
// still writes the body: an instance may answer (an early error) before
// it read a body it will never read whole.
func (f *Forwarder) roundTrip(ctx context.Context, head meshRequestHead, up upstreamBody, local table.MeshLocal) (*http.Response, instanceAnswer, error) {
	target := head.Path
	if head.Query != "" {
		target += "?" + head.Query
	}
	if f.pool != nil && up.stream == nil {
		// The destination never leaves the host, whatever the table holds.
		addr, err := f.upAddrs.get(local.Base)
		if err != nil {
			return nil, nil, fmt.Errorf("local base %q: %w", local.Base, err)
		}
		// The request's parts and its answer's finish in one
		// allocation, its two header fields beside it (no header map).
		// Field by field into the new (zeroed) allocation: assigning
		// whole composite literals copied both structs again, a
		// http.Request being some 250 bytes (1.8% of a serving node).
		x := &poolExchange{f: f}
		r := &x.r
		r.Method, r.RequestURI = head.Method, target
		r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
		req := &x.req
		req.R, req.Host, req.Body, req.InMem = r, addr, up.data, true
		req.ContentType, req.Accept = head.ContentType, head.Accept
		// The answer's header is written into its head frame, copied,
		// before the answer is finished.
		req.HeaderDone = true
		x.uc, x.res, x.stop, err = f.pool.RoundTrip(ctx, httpfast.PoolKey{Role: head.Role, Addr: addr}, req)
		if err != nil {
			return nil, nil, err
		}
		return x.res, x, nil
	}
	req, err := http.NewRequestWithContext(ctx, head.Method, local.Base+target, nil)
	if err != nil {
		return nil, nil, err
	}
	if up.n != 0 {
		// The transport closes the body when it is done, possibly after
		// RoundTrip returned; the stream is read no more once the caller
		// returned (StopReading, Reset).
		var body io.Reader = up.stream
		if up.stream == nil {
			body = bytes.NewReader(up.data)
		}
		req.Body, req.ContentLength = io.NopCloser(body), up.n
	}
	if head.ContentType != "" {
		req.Header["Content-Type"] = []string{head.ContentType}
	}
	if head.Accept != "" {
		req.Header["Accept"] = []string{head.Accept}
	}
	res, err := f.transport.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	return res, (*transportAnswer)(res), nil
}

// refuseHead refuses a request whose head was read and nothing of its
// body. On a connection the rest of a small request (one the serving side
// reads whole anyway) is read first, so that the connection serves the
// next exchange; a QUIC stream just stops reading.
func (f *Forwarder) refuseHead(s inferStream, peer mesh.PeerInfo, head meshRequestHead, code string) {
	if _, ok := s.(requestEnder); ok && head.BodyBytes >= 0 && head.BodyBytes <= proxy.MeshBufferedBodyBytes {
		// A consumer reuses a connection only after a request of at most
		// this size (forward.go); a larger one's connection closes after.
		if _, err := io.Copy(io.Discard, &meshBodyReader{r: s, arm: s, announced: head.BodyBytes, limit: head.BodyBytes}); err != nil {
			f.readFailed(s, peer, head.Role, err)
			return
		}
	}
	f.refuse(s, peer, head.Role, code)
}

// bodyFailed answers a streamed body that failed on its way to the
// instance: a refusal for one that is not a JSON object or is over the
// limit, a reset for broken framing, silence or a peer that went away.
func (f *Forwarder) bodyFailed(s inferStream, peer mesh.PeerInfo, role string, err error) {
	if errors.Is(err, modelpin.ErrNotObject) {
		f.refuse(s, peer, role, RefuseBadRequest)
		return
	}
	f.readFailed(s, peer, role, err)
}

// readFailed answers a request that could not be read: a refusal for a
// head that does not validate, a reset for broken framing or silence.
func (f *Forwarder) readFailed(s inferStream, peer mesh.PeerInfo, role string, err error) {
	var we *wireError
	var ne net.Error
	switch {
	case errors.As(err, &we):
		f.refuse(s, peer, role, we.code)
	case errors.As(err, &ne) && ne.Timeout():
		f.reset(s, peer, role, mesh.StreamCodeTimeout, servedTimeout, err)
	case errors.Is(err, mesh.ErrFrameTooLarge):
		f.reset(s, peer, role, mesh.StreamCodeTooLarge, servedMalformed, err)
	case errors.Is(err, errMalformedFrames), errors.Is(err, mesh.ErrTruncatedFrame), errors.Is(err, io.EOF):
		f.reset(s, peer, role, mesh.StreamCodeMalformed, servedMalformed, err)
	default:
		f.reset(s, peer, role, mesh.StreamCodeCancelled, servedCancelled, err)
	}
}

// reset ends the stream with an error code and counts it.
func (f *Forwarder) reset(s inferStream, peer mesh.PeerInfo, role string, code mesh.StreamCode, outcome string, err error) {
	s.Reset(code)
	f.met.serve(f.roleLabel(role), outcome)
	f.log.Debug("mesh infer stream reset", zap.String("peer", peer.ID), zap.String("outcome", outcome), zap.Error(err))
}

// refuse sends a refusal with its generic message, ends the stream,
// counts it and hands it to the Recorder, keyed by the peer and the
// refusal code (the role is the peer's choice: it stays out of the key).
func (f *Forwarder) refuse(s inferStream, peer mesh.PeerInfo, role, code string) {
	_ = s.SetWriteDeadline(time.Now().Add(MeshFrameTimeout))
	if err := writeJSONFrame(s, frameRefusal, meshRefusal{V: MeshWireVersion, Code: code, Message: genericMessages[code]}); err != nil {
		s.AbortWrite(mesh.StreamCodeCancelled)
	} else {
		_ = s.CloseWrite()
	}
	s.StopReading(mesh.StreamCodeCancelled) // the rest of the request is not wanted
	f.met.serve(f.roleLabel(role), code)
	f.log.Debug("mesh infer request refused", zap.String("peer", peer.ID), zap.String("role", role), zap.String("code", code))
	if f.rec == nil {
		return
	}
	ev := MeshRefusedEvent{Peer: peer.ID, Role: role, Code: code}
	if _, err := f.rec.Record(chain.RecordKey{Sender: peer.ID, Kind: AuditKindMeshRefused, Reason: code}, AuditSource, ev); err != nil {
		f.log.Warn("audit record not written", zap.String("kind", AuditKindMeshRefused), zap.Error(err))
	}
}

// roleLabel returns role when this node exposes it, else "unknown": a
// peer can send any role name, and labels must stay bounded.
func (f *Forwarder) roleLabel(role string) string {
	if er, ok := f.table.(exposedRoles); ok && role != "" && er.RoleExposed(role) {
		return role
	}
	return unknownRole
}

// acquire takes a per-peer and a total serving slot without waiting.
func (f *Forwarder) acquire(peer string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if int64(f.inflight) >= f.total.Load() || int64(f.byPeer[peer]) >= f.perPeer.Load() {
		return false
	}
	f.inflight++
	f.byPeer[peer]++
	f.met.inflight.Inc()
	return true
}

func (f *Forwarder) release(peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight--
	if f.byPeer[peer]--; f.byPeer[peer] <= 0 {
		delete(f.byPeer, peer)
	}
	f.met.inflight.Dec()
}

// maxUpstreamAddrs bounds upstreamAddrs: past it the cache starts over.
const maxUpstreamAddrs = 256

// upstreamAddrs caches local instances' base URLs checked and parsed
// (grammar.ParseLoopbackURL) into the host:port dialed, for the requests
// peers send them. Safe for concurrent use; the zero value is empty.
type upstreamAddrs struct {
	m sync.Map // base URL -> host:port
	n atomic.Int64
}

func (c *upstreamAddrs) get(base string) (string, error) {
	if a, ok := c.m.Load(base); ok {
		return a.(string), nil
	}
	ap, err := grammar.ParseLoopbackURL(base)
	if err != nil {
		return "", err
	}
	a := ap.String()
	if c.n.Add(1) > maxUpstreamAddrs {
		c.m.Clear()
		c.n.Store(1)
	}
	c.m.Store(base, a)
	return a, nil
}
