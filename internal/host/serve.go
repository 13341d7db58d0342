package host

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
)

// serveCtl is the mesh handler of KindCtl: one call per stream, verified
// against the key the QUIC peer authenticated with. Artifacts for a place
// are fetched from that same peer. The streams' Close ends both
// directions, so a read blocked on one returns when its call is over.
func (h *Host) serveCtl(ctx context.Context, peer mesh.PeerInfo, s *mesh.Stream) {
	open := func(ctx context.Context) (io.ReadWriteCloser, error) {
		st, err := h.mesh.OpenStream(ctx, peer.ID, mesh.KindArtifact)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	if err := h.serve(ctx, s, peer.Key, peer.ID, open); err != nil {
		h.log.Debug("ctl stream", zap.String("peer", peer.ID), zap.Error(err))
	}
}

// ServeLocal serves one workload.ctl call from this node's own operator
// (the local socket), without a mesh stream: the request must be signed
// with the node's own key, which stands for the QUIC peer key, and must
// name this node as target. The node key is a controller for local calls
// only if Config.Controllers lists it. artifacts opens streams to the
// local artifact server for place and load (the same protocol as over the
// mesh); nil refuses them with fetch. It returns I/O errors only.
func (h *Host) ServeLocal(ctx context.Context, s ctl.Stream, artifacts ArtifactOpener) error {
	return h.serve(ctx, s, h.self.PublicKey(), h.self.ID(), artifacts)
}

// serve answers one call and chains its refusal (see account).
func (h *Host) serve(ctx context.Context, s ctl.Stream, peerKey []byte, peerID string, open ArtifactOpener) error {
	srv, err := ctl.NewServer(ctl.ServerConfig{
		Verifier: h.verifier,
		Key:      h.self.PrivateKey(),
		Handler: func(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
			return h.handle(ctx, req, open)
		},
	})
	if err != nil {
		_ = s.Close()
		return fmt.Errorf("ctl server: %w", err)
	}
	served, err := srv.Serve(ctx, s, peerKey)
	if served.Method != "" || served.Refusal != nil {
		h.account(served, peerID)
	}
	return err
}

// account counts a served call and chains its refusal. A controller's
// refused mutation names its decision and is chained as such; every other
// refusal (of an unauthenticated call, or of describe, status or logs,
// which any admitted peer may repeat at will: 11,000 logs calls for a
// missing instance added 3,500 entries) goes through the Recorder, keyed
// by the peer the stream authenticated, the kind and the refusal code.
func (h *Host) account(served ctl.Served, peerID string) {
	method := string(served.Method)
	if !served.Method.Known() {
		method = "other"
	}
	result := "ok"
	if served.Refusal != nil {
		result = string(served.Refusal.Code)
	}
	h.met.calls.WithLabelValues(method, result).Inc()
	if served.Refusal == nil {
		return
	}
	payload := map[string]any{
		"method": method, "code": served.Refusal.Code, "reason": served.Refusal.Reason, "peer": peerID,
		"authenticated": served.Authenticated,
	}
	code := string(served.Refusal.Code)
	if !served.Authenticated {
		h.recordRepeatable(peerID, KindCtlRefused, code, payload)
		return
	}
	req := served.Request
	payload["requester"] = req.Requester
	if req.DecisionID != "" {
		payload["decision_id"] = req.DecisionID
	}
	kind := KindCtlRefused
	if req.Method == ctl.MethodPlace || req.Method == ctl.MethodLoad {
		kind = KindPlaceRefused
		if p, err := ctl.DecodePlaceParams(req.Body); err == nil {
			payload["package"], payload["version"], payload["variant"] = p.Package, p.Version, p.Variant
		}
	} else if p, err := ctl.DecodeInstanceParams(req.Method, req.Body); err == nil && p.InstanceID != "" {
		payload["instance_id"] = p.InstanceID
	}
	if !ctl.IsMutating(req.Method) {
		h.recordRepeatable(peerID, kind, code, payload)
		return
	}
	// Only a controller's request passes verification for a mutation.
	_ = h.record(kind, payload)
}

// handle dispatches a verified request.
func (h *Host) handle(ctx context.Context, req ctl.Request, open ArtifactOpener) (any, *ctl.Refusal) {
	cfg := h.config()
	if ctl.IsMutating(req.Method) && !cfg.Enabled {
		return nil, ctl.NewRefusal(ctl.CodeUnauthorized, "the workload host is disabled on this node")
	}
	switch req.Method {
	case ctl.MethodDescribe:
		return h.describe(ctx)
	case ctl.MethodPlace, ctl.MethodLoad:
		return h.place(ctx, req, open)
	}
	p, err := ctl.DecodeInstanceParams(req.Method, req.Body)
	if err != nil {
		return nil, asRefusal(err)
	}
	switch req.Method {
	case ctl.MethodStatus:
		return h.status(p)
	case ctl.MethodLogs:
		return h.logs(p)
	case ctl.MethodStart:
		return h.start(ctx, req, p)
	case ctl.MethodStop:
		return h.stop(ctx, req, p)
	case ctl.MethodUnload:
		return h.unload(ctx, req, p)
	}
	return nil, ctl.NewRefusal(ctl.CodeUnknownMethod, "method is not served")
}

func asRefusal(err error) *ctl.Refusal {
	if r, ok := err.(*ctl.Refusal); ok {
		return r
	}
	return ctl.NewRefusal(ctl.CodeInvalidRequest, err.Error())
}

// describe returns the signed facts, the advertisement and the chain head.
func (h *Host) describe(ctx context.Context) (any, *ctl.Refusal) {
	res := ctl.DescribeResult{Facts: json.RawMessage("null")}
	if h.facts != nil {
		signed, err := h.facts.Signed(ctx)
		if err != nil {
			return nil, ctl.NewRefusal(ctl.CodeRuntime, "facts: "+err.Error())
		}
		b, err := json.Marshal(signed)
		if err != nil {
			return nil, ctl.NewRefusal(ctl.CodeRuntime, "facts not encodable")
		}
		res.Facts = b
	}
	ad, err := json.Marshal(h.Advertisement(h.now()))
	if err != nil {
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "advertisement not encodable")
	}
	res.Advertisement = ad
	_, res.ChainHead = h.audit.Head()
	return res, nil
}
