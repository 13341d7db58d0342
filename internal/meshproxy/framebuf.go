package meshproxy

import (
	"errors"
	"io"
	"sync"

	"github.com/nodeld/nodeld/internal/mesh"
)

// frameBufBytes holds a head and a body chunk, each with its frame header,
// and an end frame: what one Write of a KindInfer stream carries at most.
const frameBufBytes = MaxMeshHeadBytes + MeshChunkBytes + 3*mesh.FrameHeaderSize

// StreamFirstBufBytes is the frame buffer an event stream's answer (SSE or
// NDJSON) holds on either side once its head has gone: such a stream may
// stay open for minutes with a few hundred bytes an event, and 1,000 of
// them holding frameBufBytes each would hold 80 MB on each node. A frame
// that needs more swaps it for a frameBufBytes buffer for the rest of the
// stream.
const StreamFirstBufBytes = 4 << 10

// framePools are the forwarder's frame buffers: large ones (frameBufBytes)
// for requests and ordinary answers, small ones (StreamFirstBufBytes) for
// event streams. A nil *framePools allocates each buffer (tests, fuzz).
type framePools struct {
	large, small sync.Pool // *[]byte
}

func newFramePools() *framePools {
	p := &framePools{}
	p.large.New = func() any {
		b := make([]byte, 0, frameBufBytes)
		return &b
	}
	p.small.New = func() any {
		b := make([]byte, 0, StreamFirstBufBytes)
		return &b
	}
	return p
}

// frameBuf is the frame buffer of one exchange, large or small, taken from
// pools and given back by release. It is used by one goroutine.
type frameBuf struct {
	pools *framePools
	p     *[]byte
	small bool
}

// largeBuf returns a large frame buffer.
func (p *framePools) largeBuf() frameBuf {
	fb := frameBuf{pools: p}
	fb.take(false)
	return fb
}

// bufFor returns the buffer a request is sent from: small when the body is
// held and at most smallBodyBytes, whose frames then fit it with the head
// most requests have; large otherwise, so a larger body leaves in as few
// writes as before. A head longer than the room left is appended past the
// buffer (sendRequest's appends reallocate): correct, only slower.
func (p *framePools) bufFor(streamed bool, bodyBytes int) frameBuf {
	fb := frameBuf{pools: p}
	fb.take(!streamed && bodyBytes <= smallBodyBytes)
	return fb
}

// smallBodyBytes is the largest held request body sent from a small
// buffer: half of it, the rest for the head and the frame headers.
const smallBodyBytes = StreamFirstBufBytes / 2

func (fb *frameBuf) take(small bool) {
	fb.small = small
	switch {
	case fb.pools == nil && small:
		b := make([]byte, 0, StreamFirstBufBytes)
		fb.p = &b
	case fb.pools == nil:
		b := make([]byte, 0, frameBufBytes)
		fb.p = &b
	case small:
		fb.p = fb.pools.small.Get().(*[]byte)
	default:
		fb.p = fb.pools.large.Get().(*[]byte)
	}
}

// bytes returns the buffer, empty, with its capacity.
func (fb *frameBuf) bytes() []byte { return (*fb.p)[:0] }

// shrink swaps a large buffer for a small one (what it held is lost).
func (fb *frameBuf) shrink() {
	if !fb.small {
		fb.release()
		fb.take(true)
	}
}

// grow swaps a small buffer for a large one (what it held is lost).
func (fb *frameBuf) grow() {
	if fb.small {
		fb.release()
		fb.take(false)
	}
}

// release gives the buffer back; fb is not used afterwards but by take.
func (fb *frameBuf) release() {
	if fb.pools == nil || fb.p == nil {
		fb.p = nil
		return
	}
	if fb.small {
		fb.pools.small.Put(fb.p)
	} else {
		fb.pools.large.Put(fb.p)
	}
	fb.p = nil
}

// readFrameGrow reads one frame of at most bound payload bytes into fb's
// buffer, swapping a small buffer for a large one first when the frame
// needs it, and returns the payload (in fb's buffer until its next use).
// Its errors are mesh.ReadFrameInto's.
func readFrameGrow(r io.Reader, fb *frameBuf, bound int) (mesh.FrameType, []byte, error) {
	// The header is read into the buffer's head (the payload overwrites
	// it): no allocation a frame.
	t, n, err := mesh.ReadFrameHeaderInto(r, bound, (*fb.p)[:mesh.FrameHeaderSize])
	if err != nil {
		return 0, nil, err
	}
	if n > cap(*fb.p) {
		fb.grow()
	}
	buf := (*fb.p)[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return 0, nil, mesh.ErrTruncatedFrame
		}
		return 0, nil, err
	}
	return t, buf, nil
}
