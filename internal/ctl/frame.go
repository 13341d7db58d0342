package ctl

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/nodeld/nodeld/internal/mesh"
)

// FrameType is the first byte of a frame on a workload.ctl stream: the
// mesh's frame type, with values of ctl's own.
type FrameType = mesh.FrameType

// Frame types of a workload.ctl stream. A message (one signed envelope)
// is a run of FrameMore frames, each non-empty, closed by one FrameLast
// frame, so messages larger than MaxFrameBytes cross unchanged. Every
// frame is a mesh frame (mesh.WriteFrame, mesh.ReadFrame).
const (
	FrameMore FrameType = 1
	FrameLast FrameType = 2
)

var (
	// ErrMessageTooLarge is returned by ReadMessage when a message
	// exceeds its bound; nothing beyond the bound is read or allocated.
	ErrMessageTooLarge = errors.New("ctl message exceeds its size bound")
	// ErrMalformedMessage is returned by ReadMessage for a frame that is
	// not part of a ctl message.
	ErrMalformedMessage = errors.New("malformed ctl message")
	// ErrTruncatedMessage is returned by ReadMessage when the stream ends
	// inside a message.
	ErrTruncatedMessage = errors.New("ctl stream ended inside a message")
)

// encodeMessage returns msg split into frames, so it can be written with
// one Write: a short write then tells that the message cannot have been
// received whole.
func encodeMessage(msg []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(msg) + (len(msg)/MaxFrameBytes+1)*mesh.FrameHeaderSize)
	for {
		n := min(len(msg), MaxFrameBytes)
		t := FrameMore
		if n == len(msg) {
			t = FrameLast
		}
		// Writes to a bytes.Buffer do not fail, and n is within the
		// mesh's frame bound.
		_ = mesh.WriteFrame(&buf, t, msg[:n])
		msg = msg[n:]
		if t == FrameLast {
			return buf.Bytes()
		}
	}
}

// WriteMessage writes msg as one ctl message in a single Write.
func WriteMessage(w io.Writer, msg []byte) error {
	_, err := w.Write(encodeMessage(msg))
	return err
}

// ReadMessage reads one ctl message of at most limit bytes. It returns
// io.EOF if the stream ends cleanly before the first frame,
// ErrTruncatedMessage if it ends inside the message, ErrMessageTooLarge
// before allocating beyond limit, and ErrMalformedMessage for a frame of
// another type or an empty FrameMore.
func ReadMessage(r io.Reader, limit int) ([]byte, error) {
	var msg []byte
	for first := true; ; first = false {
		// mesh.ReadFrame refuses, before allocating, a frame above the
		// room left; with no room left (a bound of 0 means the mesh's
		// own bound there) a one-byte frame is read and refused below.
		room := min(MaxFrameBytes, limit-len(msg))
		t, p, err := mesh.ReadFrame(r, max(room, 1))
		switch {
		case err == nil:
		case first && errors.Is(err, io.EOF):
			return nil, io.EOF
		case errors.Is(err, io.EOF) || errors.Is(err, mesh.ErrTruncatedFrame):
			return nil, ErrTruncatedMessage
		case errors.Is(err, mesh.ErrFrameTooLarge):
			return nil, ErrMessageTooLarge
		default:
			return nil, fmt.Errorf("read ctl frame: %w", err)
		}
		switch {
		case t != FrameMore && t != FrameLast:
			return nil, fmt.Errorf("frame type %d: %w", t, ErrMalformedMessage)
		case t == FrameMore && len(p) == 0:
			return nil, fmt.Errorf("empty continuation frame: %w", ErrMalformedMessage)
		case len(p) > room:
			return nil, ErrMessageTooLarge
		}
		if t == FrameLast && msg == nil {
			// A message of one frame is that frame's payload.
			return p, nil
		}
		msg = append(msg, p...)
		if t == FrameLast {
			return msg, nil
		}
	}
}
