package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/mesh"
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
// checks it and LocalForPeer, takes a per-peer and a total slot, reads the
// body, pins "model", forwards to the local instance only (never onward to
// another node) and streams the response back chunk by chunk. Refusals
// carry a stable code and a generic message and are recorded (through the
// Recorder); broken framing resets the stream.
func (f *MeshForwarder) ServeStream(ctx context.Context, peer mesh.PeerInfo, s *mesh.Stream) {
	_ = s.SetReadDeadline(time.Now().Add(MeshFirstFrameTimeout))
	head, err := readRequestHead(s)
	if err != nil {
		f.readFailed(s, peer, "", err)
		return
	}
	local, ok := f.table.LocalForPeer(head.Role, peer.ID)
	if !ok {
		f.refuse(s, peer, head.Role, RefuseNotServed)
		return
	}
	if meshPathRefusal(head.Path, local.Runtime) != "" {
		// An Ollama path for an instance that is not an Ollama (the
		// consumer's view of the advertisement was stale).
		f.refuse(s, peer, head.Role, RefuseForbiddenPath)
		return
	}
	if head.BodyBytes > f.maxBody.Load() {
		f.refuse(s, peer, head.Role, RefuseTooLarge)
		return
	}
	if !f.acquire(peer.ID) {
		f.refuse(s, peer, head.Role, RefuseOverCapacity)
		return
	}
	defer f.release(peer.ID)
	body, err := readRequestBody(s, head, func() { _ = s.SetReadDeadline(time.Now().Add(MeshFrameTimeout)) })
	if err != nil {
		f.readFailed(s, peer, head.Role, err)
		return
	}
	_ = s.SetReadDeadline(time.Time{})
	if head.Path == "/v1/models" {
		body = nil
	} else if body, err = pinModel(body, local); err != nil {
		f.refuse(s, peer, head.Role, RefuseBadRequest)
		return
	}
	f.forward(ctx, s, peer, head, body, local)
}

// forward sends the request to the local instance and streams the answer.
func (f *MeshForwarder) forward(ctx context.Context, s *mesh.Stream, peer mesh.PeerInfo, head meshRequestHead, body []byte, local table.MeshLocal) {
	ctx, cancel := context.WithTimeout(ctx, MeshServeTimeout)
	defer cancel()
	// The consumer resetting the stream (its client went away) cancels the
	// upstream request at once.
	defer context.AfterFunc(s.Context(), cancel)()
	target := local.Base + head.Path
	if head.Query != "" {
		target += "?" + head.Query
	}
	req, err := http.NewRequestWithContext(ctx, head.Method, target, bytes.NewReader(body))
	if err != nil {
		f.refuse(s, peer, head.Role, RefuseUpstreamError)
		return
	}
	if len(body) == 0 {
		req.Body = http.NoBody
	}
	if head.ContentType != "" {
		req.Header.Set("Content-Type", head.ContentType)
	}
	if head.Accept != "" {
		req.Header.Set("Accept", head.Accept)
	}
	res, err := f.transport.RoundTrip(req)
	if err != nil {
		switch {
		case s.Context().Err() != nil:
			f.reset(s, peer, head.Role, mesh.StreamCodeCancelled, servedCancelled, err)
		case isTimeout(err) || errors.Is(err, context.DeadlineExceeded):
			f.refuse(s, peer, head.Role, RefuseUpstreamTimeout)
		case isDialError(err):
			f.refuse(s, peer, head.Role, RefuseUpstreamDown)
		default:
			f.refuse(s, peer, head.Role, RefuseUpstreamError)
		}
		return
	}
	defer res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 599 {
		f.refuse(s, peer, head.Role, RefuseUpstreamError)
		return
	}
	rh := meshResponseHead{V: MeshWireVersion, Status: res.StatusCode, Headers: make(map[string]string, len(relayedResponseHeaders))}
	for _, name := range relayedResponseHeaders {
		if v := res.Header.Get(name); validHeaderValue(v) {
			rh.Headers[name] = v
		}
	}
	if err := writeJSONFrame(s, frameRespHead, rh); err != nil {
		f.reset(s, peer, head.Role, mesh.StreamCodeCancelled, servedCancelled, err)
		return
	}
	bp := f.bufs.Get().(*[]byte)
	defer f.bufs.Put(bp)
	buf := *bp
	for {
		n, rerr := res.Body.Read(buf)
		if n > 0 {
			// One frame per upstream read: an SSE event flushed by the
			// instance crosses the mesh at once.
			if err := mesh.WriteFrame(s, frameRespBody, buf[:n]); err != nil {
				f.reset(s, peer, head.Role, mesh.StreamCodeCancelled, servedCancelled, err)
				return
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if s.Context().Err() != nil {
				f.reset(s, peer, head.Role, mesh.StreamCodeCancelled, servedCancelled, rerr)
				return
			}
			f.log.Debug("upstream failed midway", zap.String("peer", peer.ID), zap.String("role", head.Role), zap.Error(rerr))
			f.refuse(s, peer, head.Role, RefuseUpstreamError)
			return
		}
	}
	if err := mesh.WriteFrame(s, frameRespEnd, nil); err != nil {
		f.reset(s, peer, head.Role, mesh.StreamCodeCancelled, servedCancelled, err)
		return
	}
	_ = s.CloseWrite() // the peer has every byte or will see the stream reset
	s.StopReading(mesh.StreamCodeCancelled)
	f.met.served.WithLabelValues(f.roleLabel(head.Role), servedOK).Inc()
}

// readFailed answers a request that could not be read: a refusal for a
// head that does not validate, a reset for broken framing or silence.
func (f *MeshForwarder) readFailed(s *mesh.Stream, peer mesh.PeerInfo, role string, err error) {
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
func (f *MeshForwarder) reset(s *mesh.Stream, peer mesh.PeerInfo, role string, code mesh.StreamCode, outcome string, err error) {
	s.Reset(code)
	f.met.served.WithLabelValues(f.roleLabel(role), outcome).Inc()
	f.log.Debug("mesh infer stream reset", zap.String("peer", peer.ID), zap.String("outcome", outcome), zap.Error(err))
}

// refuse sends a refusal with its generic message, ends the stream,
// counts it and hands it to the Recorder, keyed by the peer and the
// refusal code (the role is the peer's choice: it stays out of the key).
func (f *MeshForwarder) refuse(s *mesh.Stream, peer mesh.PeerInfo, role, code string) {
	_ = s.SetWriteDeadline(time.Now().Add(MeshFrameTimeout))
	if err := writeJSONFrame(s, frameRefusal, meshRefusal{V: MeshWireVersion, Code: code, Message: genericMessages[code]}); err != nil {
		s.AbortWrite(mesh.StreamCodeCancelled)
	} else {
		_ = s.CloseWrite()
	}
	s.StopReading(mesh.StreamCodeCancelled) // the rest of the request is not wanted
	f.met.served.WithLabelValues(f.roleLabel(role), code).Inc()
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
func (f *MeshForwarder) roleLabel(role string) string {
	if er, ok := f.table.(exposedRoles); ok && role != "" && slices.Contains(er.ExposedRoles(), role) {
		return role
	}
	return unknownRole
}

// acquire takes a per-peer and a total serving slot without waiting.
func (f *MeshForwarder) acquire(peer string) bool {
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

func (f *MeshForwarder) release(peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight--
	if f.byPeer[peer]--; f.byPeer[peer] <= 0 {
		delete(f.byPeer, peer)
	}
	f.met.inflight.Dec()
}
