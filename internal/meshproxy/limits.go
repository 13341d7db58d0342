package meshproxy

import (
	"github.com/nodeld/nodeld/internal/proxy"
)

import "time"

// Bounds of inference forwarding over the mesh (KindInfer streams). Every
// size is checked before anything derived from it is allocated.
const (
	// MeshWireVersion is the version field of every KindInfer head.
	MeshWireVersion = 1
	// MaxMeshHeadBytes bounds a request head, response head or refusal
	// frame.
	MaxMeshHeadBytes = 16 << 10
	// MeshChunkBytes is the largest body frame either side sends or
	// accepts (below mesh.MaxFrameSize).
	MeshChunkBytes = 64 << 10
	// MaxMeshHeaderValueBytes bounds a relayed header value
	// (Content-Type, Accept, Cache-Control).
	MaxMeshHeaderValueBytes = 256
	// MaxMeshRefusalMessageBytes bounds the message of a refusal.
	MaxMeshRefusalMessageBytes = 512
	// MeshFirstFrameTimeout bounds the wait for the first frame (the
	// request head) of an incoming KindInfer stream.
	MeshFirstFrameTimeout = 10 * time.Second
	// MeshFrameTimeout bounds the wait for each further request frame
	// (body chunks and the end frame).
	MeshFrameTimeout = 10 * time.Second
	// MeshFinishWait is how long either side waits, once an exchange is
	// complete, for the other side's clean end of the stream (which comes
	// with its last bytes) before it stops reading instead: the clean end
	// spares a STOP_SENDING frame, and a packet, per request.
	MeshFinishWait = time.Millisecond
	// MeshServeTimeout caps one served request from its head to the last
	// response byte.
	MeshServeTimeout = proxy.DefaultRequestTimeout
	// DefaultMeshMaxInflightPerPeer is mesh.max_inflight_per_peer when 0.
	DefaultMeshMaxInflightPerPeer = 8
	// DefaultMeshMaxInflightTotal is mesh.max_inflight_total when 0.
	DefaultMeshMaxInflightTotal = 64
	// MaxMeshInflight caps both configurable slot counts.
	MaxMeshInflight = 4096
)
