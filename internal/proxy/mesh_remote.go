package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"go.uber.org/zap"

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
func (p *Proxy) forwardRemote(rec *recorder, r *http.Request, role string, target table.Target, set *Config, in *bodyReader) {
	rec.Header().Set(RouteHeader, target.NodeID)
	if r.ContentLength > set.MeshMaxBodyBytes {
		writeError(rec, r, errTooLarge(set.MeshMaxBodyBytes))
		return
	}
	held, stream, err := meshBody(rec.ResponseWriter, in, r.ContentLength, set.MeshMaxBodyBytes)
	if err != nil {
		writeError(rec, r, bodyError(err, in))
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	wd := startWatchdog(set.StallTimeout, set.RequestTimeout, cancel)
	defer wd.stop()
	rec.wd = wd
	rec.autoFlush = true
	out := r.WithContext(ctx)
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
	var be *clientBodyError
	if errors.As(err, &be) && rec.status == 0 {
		writeError(rec, r, bodyError(be.err, in))
		return
	}
	if err != nil && rec.status == 0 && ctx.Err() == nil && errors.Is(err, errNotAnswered) {
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
		case !ok || next.Kind != table.TargetRemote || meshPathRefusal(r.URL.Path, next.Runtime) != "":
			p.metrics.retries.WithLabelValues(retryNoCandidate).Inc()
		default:
			p.log.Info("forward failed before an answer; retrying", zap.String("role", role),
				zap.String("failed", target.NodeID), zap.String("next", next.NodeID), zap.Error(err))
			target = next
			rec.Header().Set(RouteHeader, target.NodeID)
			err = p.remote.ForwardRemote(ctx, target.NodeID, role, out, held, rec)
			if err == nil {
				p.metrics.retries.WithLabelValues(retryOK).Inc()
			} else {
				p.metrics.retries.WithLabelValues(retryFailed).Inc()
			}
		}
	}
	if err == nil {
		return
	}
	if rec.status != 0 {
		p.log.Debug("remote stream cut", zap.String("role", role), zap.String("node", target.NodeID), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
	if r.Context().Err() != nil {
		return // the client went away; counted as statusClientClosed
	}
	if target.WaitingForLink && (errors.Is(err, mesh.ErrNoLink) || errors.Is(err, errPeerNotServing)) {
		// The only candidate was a peer that restarted, and its new run
		// did not link within the mesh's restart wait, or linked but
		// does not serve the role (yet): nothing serves the role, as
		// when no route is left at all.
		p.log.Warn("restarted peer does not serve the role again within its wait", zap.String("role", role),
			zap.String("node", target.NodeID), zap.Error(err))
		writeError(rec, r, errNoInstanceRestarted(role))
		return
	}
	e, ok := asError(err)
	if !ok {
		switch context.Cause(ctx) {
		case errStalled:
			e = &Error{Status: http.StatusGatewayTimeout, Type: TypeTimeout, Code: CodeUpstreamTimeout,
				Message: "timeout: peer did not answer within " + set.StallTimeout.String()}
		case errRequestTimeout:
			e = &Error{Status: http.StatusGatewayTimeout, Type: TypeTimeout, Code: CodeUpstreamTimeout,
				Message: "timeout: request took longer than " + set.RequestTimeout.String()}
		default:
			e = &Error{Status: http.StatusBadGateway, Type: TypeUpstream, Code: CodeUpstreamError,
				Message: "mesh: forwarding to the peer serving role '" + role + "' failed"}
		}
	}
	p.log.Warn("remote forward failed", zap.String("role", role), zap.String("node", target.NodeID), zap.Error(err))
	writeError(rec, r, e)
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
