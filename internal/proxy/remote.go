package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/table"
)

// forwardRemote hands r to the peer serving role through the mesh. A body
// of at most MeshBufferedBodyBytes is read into memory first (bounded by
// BodyTimeout), so that a forward whose link fails before the peer
// answered can be sent, once, to the next peer. A larger body (declared,
// or of unknown length and found larger) is streamed to the peer as the
// client sends it, bounded by MeshMaxBodyBytes and BodyTimeout, feeding
// the stall watchdog as it goes; it is not retried, since it was not kept.
//
// This loop owns a forward's retry, and is its only owner: it asks the
// table, tries, and on a retryable failure (ErrNotAnswered, nothing
// relayed) asks the table again and tries once more. Below it nothing
// sends a forward again: the mesh never replays an inference stream
// (OpenStream only picks a live link before anything is written), and the
// RemoteForwarder makes one attempt per call (but on a pooled connection
// found closed before its send, meshproxy's). Nor does anything below it
// change routes: a link the forward finds dead reaches the table as the
// mesh's event, whatever this loop does.
//
// A forward whose every try failed before anything was relayed, with its
// body held, returns resendOnRoute (and the body) when its role may be
// held (mayHold): the caller waits for the role's next route. With
// waitFree (a held request, whose body its caller keeps), a peer's
// refusal for being at its in-flight limit (ErrPeerBusy) returns
// resendWhenFree: the caller waits for a slot. Without it the refusal
// is the client's answer (429 over_capacity).
func (p *Proxy) forwardRemote(st *remoteState, r *http.Request, role string, target table.Target, set *Config, in *bodyReader, waitFree bool) (body []byte, again resend) {
	rec := &st.rec
	rec.Header()[RouteHeader] = append(st.node[:0], target.NodeID)
	if r.ContentLength > set.MeshMaxBodyBytes {
		writeError(rec, r, TooLargeError(set.MeshMaxBodyBytes))
		return nil, resendNo
	}
	held, stream, err := meshBody(rec.ResponseWriter, in, r.ContentLength, set.MeshMaxBodyBytes)
	if err != nil {
		writeError(rec, r, bodyError(err, in))
		return nil, resendNo
	}
	ctx, cancel := st.forwardContext(r, set)
	wd := &st.wd
	defer func() { wd.Stop(); cancel(nil) }() // one deferred call: open-coded
	ex := &exchange{client: r.Context(), ctx: ctx}
	out := &st.out // r's copy on the fast reader's context: no allocation
	if *out = *r; ctx != r.Context() {
		out = r.WithContext(ctx)
	}
	rec.wd = wd
	rec.autoFlush = true
	if stream != nil {
		in.wd = wd
		out.Body = stream
		if r.ContentLength < 0 {
			out.ContentLength = -1
		}
	} else {
		out.Body, out.ContentLength = http.NoBody, 0 // ForwardRemote sends held
	}
	err = p.remote.ForwardRemote(ctx, target.NodeID, role, out, held, rec)
	if be, ok := err.(*ClientBodyError); ok && rec.status == 0 { // unwrapped: no allocation
		writeError(rec, r, bodyError(be.Err, in))
		return nil, resendNo
	}
	if err != nil && rec.status == 0 && ctx.Err() == nil && errors.Is(err, ErrNotAnswered) {
		// The link to the peer failed before it answered and nothing was
		// relayed: try the next candidate, once, if the body is held. A
		// peer that restarted (the link led to its previous run) is its
		// own next candidate: its new run serves the role as soon as it
		// is linked, which the mesh waits for.
		next, ok := p.resolver.ResolveExcept(role, target.NodeID)
		if mesh.PeerRestarted(err) {
			next, ok = target, true
		}
		switch {
		case stream != nil:
			p.metrics.retries.WithLabelValues(retryStreamed).Inc()
		case !ok || next.Kind != table.TargetRemote || MeshPathRefusal(r.URL.Path, next.Runtime) != "":
			p.metrics.retries.WithLabelValues(retryNoCandidate).Inc()
		default:
			p.log.Info("forward failed before an answer; retrying", zap.String("role", role),
				zap.String("failed", target.NodeID), zap.String("next", next.NodeID), zap.Error(err))
			target = next
			rec.Header()[RouteHeader] = append(st.node[:0], target.NodeID)
			err = p.remote.ForwardRemote(ctx, target.NodeID, role, out, held, rec)
			if err == nil {
				p.metrics.retries.WithLabelValues(retryOK).Inc()
			} else {
				p.metrics.retries.WithLabelValues(retryFailed).Inc()
			}
		}
	}
	if err == nil {
		return nil, resendNo
	}
	if rec.status != 0 {
		p.log.Debug("remote stream cut", zap.String("role", role), zap.String("node", target.NodeID), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
	if ex.clientGone() {
		return nil, resendNo // the client went away; counted as statusClientClosed
	}
	if waitFree && ctx.Err() == nil && errors.Is(err, ErrPeerBusy) {
		// Refused before anything was relayed: the peer never served
		// the request.
		rec.Header().Del(RouteHeader)
		return nil, resendWhenFree
	}
	if stream == nil && ctx.Err() == nil && notAnswered(err) {
		if _, ok := p.mayHold(role); ok {
			rec.Header().Del(RouteHeader)
			p.log.Info("forward failed before an answer; holding", zap.String("role", role),
				zap.String("node", target.NodeID), zap.Error(err))
			return held, resendOnRoute
		}
	}
	if target.WaitingForLink && (errors.Is(err, mesh.ErrNoLink) || errors.Is(err, ErrPeerNotServing)) {
		// The only candidate was a peer that restarted, and its new run
		// did not link within the mesh's restart wait, or linked but
		// does not serve the role (yet): nothing serves the role, as
		// when no route is left at all.
		p.log.Warn("restarted peer does not serve the role again within its wait", zap.String("role", role),
			zap.String("node", target.NodeID), zap.Error(err))
		writeError(rec, r, errNoInstanceRestarted(role))
		return nil, resendNo
	}
	e, ok := asError(err)
	if !ok {
		switch httpfast.Cause(ctx) {
		case httpfast.ErrStalled:
			e = &Error{Status: http.StatusGatewayTimeout, Type: TypeTimeout, Code: CodeUpstreamTimeout,
				Message: "timeout: peer did not answer within " + set.StallTimeout.String()}
		case httpfast.ErrRequestTimeout:
			e = &Error{Status: http.StatusGatewayTimeout, Type: TypeTimeout, Code: CodeUpstreamTimeout,
				Message: "timeout: request took longer than " + set.RequestTimeout.String()}
		default:
			e = &Error{Status: http.StatusBadGateway, Type: TypeUpstream, Code: CodeUpstreamError,
				Message: "mesh: forwarding to the peer serving role '" + role + "' failed"}
		}
	}
	p.log.Warn("remote forward failed", zap.String("role", role), zap.String("node", target.NodeID), zap.Error(err))
	writeError(rec, r, e)
	return nil, resendNo
}

// notAnswered reports whether a forward failed before the peer answered:
// its link failed (none, or it died), or the peer does not serve the role.
func notAnswered(err error) bool {
	return errors.Is(err, ErrNotAnswered) || errors.Is(err, mesh.ErrNoLink) || errors.Is(err, ErrPeerNotServing)
}

// meshBody decides how a request body crosses the mesh: held (read whole,
// at most MeshBufferedBodyBytes) or stream (the body still to be read,
// bounded by limit). A body of unknown length is read up to the
// threshold: if it ends there it is held, else what was read is sent
// first and the rest streams. No body: both nil.
func meshBody(w http.ResponseWriter, in *bodyReader, declared, limit int64) (held []byte, stream io.ReadCloser, err error) {
	if in == nil {
		return nil, nil, nil
	}
	if declared >= 0 && declared <= MeshBufferedBodyBytes {
		held, err = readBody(w, in, declared, limit)
		return held, nil, err
	}
	body := http.MaxBytesReader(w, in, limit)
	if declared > 0 {
		return nil, body, nil
	}
	var first bytes.Buffer
	if _, err := first.ReadFrom(io.LimitReader(body, MeshBufferedBodyBytes+1)); err != nil {
		return nil, nil, err
	}
	if first.Len() <= MeshBufferedBodyBytes {
		return first.Bytes(), nil, nil
	}
	return nil, readCloser{io.MultiReader(&first, body), body}, nil
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// The contract of a RemoteForwarder: the errors it wraps for the proxy to
// act on, and the paths it carries.

// ErrPeerNotServing marks a forward the peer refused because it does not
// serve the role to this node: a peer's new run after a restart, linked
// before it has its instance, answers so.
var ErrPeerNotServing = errors.New("the peer does not serve the role")

// ErrPeerBusy marks a forward the peer refused before answering anything
// because it serves as many requests as it allows (its per-peer or total
// in-flight limit): a RemoteForwarder wraps it with the *Error an
// ordinary request is answered (429 over_capacity); a held request
// waits for a slot instead (serveHeld).
var ErrPeerBusy = errors.New("the peer is serving as many requests as it allows")

// ErrNotAnswered marks a forward that failed because the link to the peer
// failed (none, or it died) before the peer answered: a RemoteForwarder
// wraps it so the proxy may try the next candidate.
var ErrNotAnswered = errors.New("the link to the peer failed before it answered")

// ClientBodyError is a streamed request body that could not be read from
// the client; the stream to the peer was reset. ForwardRemote returns it
// as it is, not wrapped.
type ClientBodyError struct{ Err error }

func (e *ClientBodyError) Error() string { return "reading the request body: " + e.Err.Error() }
func (e *ClientBodyError) Unwrap() error { return e.Err }

// meshPath reports whether path is one of the only paths served to
// peers: narrower than what the loopback listener serves (no /health, no
// Ollama API, no other /v1 path).
func meshPath(path string) bool {
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models":
		return true
	}
	return false
}

// ollamaMeshPath reports whether path is one of Ollama's inference paths:
// carried to a peer, with the same model pinning and header stripping as
// the /v1 paths, only when the peer's instance of the role is an Ollama
// (its advertisement says so, and the serving node checks again).
// Ollama's read and management paths never cross the mesh.
func ollamaMeshPath(path string) bool {
	switch path {
	case "/api/chat", "/api/generate", "/api/embed", "/api/embeddings":
		return true
	}
	return false
}

// MeshPathRefusal says why path is not carried to a peer whose instance
// of the role runs runtime, or "" when it is.
func MeshPathRefusal(path, runtime string) string {
	switch {
	case meshPath(path):
		return ""
	case ollamaMeshPath(path) && runtime == ollamaRuntime:
		return ""
	case ollamaMeshPath(path):
		return "whose instance is not an Ollama (runtime " + strconv.Quote(runtime) + "), so Ollama's API is not forwarded to it: use the /v1 paths"
	default:
		return "which is not asked for " + path + ": peers serve /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, and Ollama's inference paths when their instance is an Ollama"
	}
}

// IsMeshPath reports whether path is ever carried to a peer: a /v1 path
// of meshPath, or one of Ollama's inference paths (MeshPathRefusal says
// for which runtime).
func IsMeshPath(path string) bool { return meshPath(path) || ollamaMeshPath(path) }
