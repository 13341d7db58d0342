package demand

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
)

// Opener is the mesh as the Client uses it (*mesh.Mesh).
type Opener interface {
	OpenStream(ctx context.Context, nodeID string, kind mesh.StreamKind) (*mesh.Stream, error)
	Peer(nodeID string) (mesh.PeerInfo, bool)
}

var _ Opener = (*mesh.Mesh)(nil)

// ErrUnreachable is returned for a call that could not be sent: no link
// to the controller, no pinned key, or no local controller.
var ErrUnreachable = errors.New("demand: controller unreachable")

// Client sends demand calls: over the mesh to a peer's controller, in
// memory to this node's own.
type Client struct {
	key   ed25519.PrivateKey
	self  string
	mesh  Opener
	local *Server
	met   *metrics
	now   func() time.Time
}

// Call demands role of controller (a node id) and returns the state it
// answered, a *Refused, ErrUnreachable or another error (no valid answer).
func (c *Client) Call(ctx context.Context, controller, role string) (string, error) {
	c.met.sent.Inc()
	state, err := c.call(ctx, controller, role)
	var ref *Refused
	switch {
	case err == nil:
		c.met.answered.WithLabelValues(state).Inc()
	case errors.As(err, &ref):
		c.met.refused.WithLabelValues(string(ref.Code)).Inc()
	case errors.Is(err, ErrUnreachable):
		c.met.refused.WithLabelValues("unreachable").Inc()
	default:
		c.met.refused.WithLabelValues("bad_answer").Inc()
	}
	return state, err
}

func (c *Client) call(ctx context.Context, controller, role string) (string, error) {
	if controller == c.self {
		if c.local == nil {
			return "", fmt.Errorf("%w: this node runs no demand server", ErrUnreachable)
		}
		return c.local.serveLocal(ctx, role)
	}
	if c.mesh == nil {
		return "", fmt.Errorf("%w: no mesh", ErrUnreachable)
	}
	peer, ok := c.mesh.Peer(controller)
	if !ok || len(peer.Key) != ed25519.PublicKeySize {
		return "", fmt.Errorf("%w: %s has no pinned key", ErrUnreachable, controller)
	}
	nonce, err := ctl.NewNonce(rand.Reader)
	if err != nil {
		return "", err
	}
	now := c.now()
	req := Request{Version: Version, Role: role, Requester: c.self, Target: controller, Nonce: nonce,
		IssuedAtMS: now.UnixMilli(), ExpiresAtMS: now.Add(RequestTTL).UnixMilli()}
	wire, err := sealJSON(c.key, RequestDomain, req)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, StreamTimeout)
	defer cancel()
	st, err := c.mesh.OpenStream(ctx, controller, mesh.KindDemand)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	stop, err := st.Request(ctx, FrameRequest, wire)
	defer stop()
	if err != nil {
		return "", fmt.Errorf("send demand: %w", err)
	}
	typ, out, err := mesh.ReadFrame(st, MaxResponseBytes)
	if err != nil || typ != FrameResponse {
		st.Reset(mesh.StreamCodeCancelled)
		return "", fmt.Errorf("%w: read: type %d: %v", errBadAnswer, typ, err)
	}
	st.StopReading(mesh.StreamCodeCancelled)
	resp, err := decodeResponse(out, req, peer.Key)
	if err != nil {
		return "", err
	}
	if resp.Code != "" {
		return "", &Refused{Code: resp.Code, Message: resp.Message}
	}
	return resp.State, nil
}

// selfID is the node id of key.
func selfID(key ed25519.PrivateKey) string {
	return identity.NodeID(key.Public().(ed25519.PublicKey))
}
