package host

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"slices"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
)

// front is the signed-call side of workload.ctl: it serves one call per
// stream (a mesh stream of kind mesh.KindCtl, or the local operator's),
// has the verifier check its signature, nonce and caller (readOnly),
// fences off deposed controllers by raft term (terms, whose lock is its
// own), refuses the mutating methods of a disabled host, routes the call to the
// lifecycle or the read model, and counts and chains what it served. It
// has no state of its own (the verifier locks its nonces) and no lock.
type front struct {
	self     *identity.Identity
	mesh     Mesh // nil: local calls only
	verifier *ctl.Verifier
	terms    *terms
	config   func() Config
	lc       *lifecycle
	view     *readModel
	jnl      *journal
	met      *metrics
	log      *zap.Logger
}

// readOnly is the verifier's rule for callers that are not controllers:
// this node (the local operator) may call describe, status and logs; an
// admitted mesh peer may call describe, and status and logs only if it is
// a reader. It holds whether the host is enabled or not.
func (f *front) readOnly(k ed25519.PublicKey, m ctl.Method) bool {
	if k.Equal(f.self.PublicKey()) {
		return true
	}
	if f.mesh == nil || !f.mesh.IsAdmitted(identity.NodeID(k)) {
		return false
	}
	return m == ctl.MethodDescribe || f.isReader(k)
}

// isReader reports whether k is a configured reader: one of ReaderKeys,
// or the key of an admitted peer that ReaderPeers names.
func (f *front) isReader(k ed25519.PublicKey) bool {
	cfg := f.config()
	if slices.ContainsFunc(cfg.ReaderKeys, func(r ed25519.PublicKey) bool { return r.Equal(k) }) {
		return true
	}
	if f.mesh == nil {
		return false
	}
	for _, name := range cfg.ReaderPeers {
		id, ok := f.mesh.ResolveRef(name)
		if !ok {
			continue
		}
		if p, ok := f.mesh.Peer(id); ok && p.Key.Equal(k) {
			return true
		}
	}
	return false
}

// serveCtl is the mesh handler of KindCtl: one call per stream, verified
// against the key the QUIC peer authenticated with. Artifacts for a place
// are fetched from that same peer. The streams' Close ends both
// directions, so a read blocked on one returns when its call is over.
func (f *front) serveCtl(ctx context.Context, peer mesh.PeerInfo, s *mesh.Stream) {
	open := func(ctx context.Context) (io.ReadWriteCloser, error) {
		st, err := f.mesh.OpenStream(ctx, peer.ID, mesh.KindArtifact)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	if err := f.serve(ctx, s, peer.Key, peer.ID, open); err != nil {
		f.log.Debug("ctl stream", zap.String("peer", peer.ID), zap.Error(err))
	}
}

// serve answers one call and chains its refusal (see account).
func (f *front) serve(ctx context.Context, s ctl.Stream, peerKey []byte, peerID string, open ArtifactOpener) error {
	srv, err := ctl.NewServer(ctl.ServerConfig{
		Verifier: f.verifier,
		Key:      f.self.PrivateKey(),
		Handler: func(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
			return f.handle(ctx, req, open)
		},
	})
	if err != nil {
		_ = s.Close()
		return fmt.Errorf("ctl server: %w", err)
	}
	served, err := srv.Serve(ctx, s, peerKey)
	if served.Method != "" || served.Refusal != nil {
		f.account(served, peerID)
	}
	return err
}

// account counts a served call and chains its refusal. A controller's
// refused mutation names its decision and is chained as such; every other
// refusal (of an unauthenticated call, or of describe, status or logs,
// which any admitted peer may repeat at will: 11,000 logs calls for a
// missing instance added 3,500 entries) goes through the Recorder, keyed
// by the peer the stream authenticated, the kind and the refusal code.
func (f *front) account(served ctl.Served, peerID string) {
	method := string(served.Method)
	if !served.Method.Known() {
		method = "other"
	}
	result := "ok"
	if served.Refusal != nil {
		result = string(served.Refusal.Code)
	}
	f.met.calls.WithLabelValues(method, result).Inc()
	if served.Refusal == nil {
		return
	}
	payload := map[string]any{
		"method": method, "code": served.Refusal.Code, "reason": served.Refusal.Reason, "peer": peerID,
		"authenticated": served.Authenticated,
	}
	code := string(served.Refusal.Code)
	if !served.Authenticated {
		f.jnl.repeatable(peerID, KindCtlRefused, code, payload)
		return
	}
	req := served.Request
	payload["requester"] = req.Requester
	if req.Term != 0 {
		payload["term"] = req.Term
	}
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
		f.jnl.repeatable(peerID, kind, code, payload)
		return
	}
	// Only a controller's request passes verification for a mutation.
	_ = f.jnl.record(kind, payload)
}

// handle dispatches a verified request.
func (f *front) handle(ctx context.Context, req ctl.Request, open ArtifactOpener) (any, *ctl.Refusal) {
	if r := f.fence(req); r != nil {
		return nil, r
	}
	cfg := f.config()
	if ctl.IsMutating(req.Method) && !cfg.Enabled {
		return nil, ctl.NewRefusal(ctl.CodeUnauthorized, "the workload host is disabled on this node")
	}
	switch req.Method {
	case ctl.MethodDescribe:
		return f.view.describe(ctx)
	case ctl.MethodPlace, ctl.MethodLoad:
		return f.lc.place(ctx, req, open)
	}
	p, err := ctl.DecodeInstanceParams(req.Method, req.Body)
	if err != nil {
		return nil, asRefusal(err)
	}
	switch req.Method {
	case ctl.MethodStatus:
		return f.view.status(p)
	case ctl.MethodLogs:
		return f.view.logs(p)
	case ctl.MethodStart:
		return f.lc.start(ctx, req, p)
	case ctl.MethodStop:
		return f.lc.stop(ctx, req, p)
	case ctl.MethodUnload:
		return f.lc.unload(ctx, req, p)
	}
	return nil, ctl.NewRefusal(ctl.CodeUnknownMethod, "method is not served")
}

func asRefusal(err error) *ctl.Refusal {
	if r, ok := err.(*ctl.Refusal); ok {
		return r
	}
	return ctl.NewRefusal(ctl.CodeInvalidRequest, err.Error())
}
