package ctl

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/nodeld/nodeld/internal/mesh"
)

// Frame types of a workload.ctl stream. A message (one signed envelope)
// is a run of FrameMore frames, each non-empty, closed by one FrameLast
// frame, so messages larger than mesh.MaxFrameSize cross the shared frame
// codec unchanged.
const (
	FrameMore mesh.FrameType = 1
	FrameLast mesh.FrameType = 2
)

var (
	// ErrMessageTooLarge is returned by ReadMessage when a message
	// exceeds its bound; nothing beyond the bound is read or allocated.
	ErrMessageTooLarge = errors.New("ctl message exceeds its size bound")
	// ErrMalformedMessage is returned by ReadMessage for a frame that is
	// not part of a ctl message.
	ErrMalformedMessage = errors.New("malformed ctl message")
)

// encodeMessage returns msg split into frames, so it can be written with
// one Write: a short write then tells that the message cannot have been
// received whole.
func encodeMessage(msg []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(msg) + (len(msg)/mesh.MaxFrameSize+1)*mesh.FrameHeaderSize)
	for len(msg) > mesh.MaxFrameSize {
		// Writes to a bytes.Buffer cannot fail.
		_ = mesh.WriteFrame(&buf, FrameMore, msg[:mesh.MaxFrameSize])
		msg = msg[mesh.MaxFrameSize:]
	}
	_ = mesh.WriteFrame(&buf, FrameLast, msg)
	return buf.Bytes()
}

// WriteMessage writes msg as one ctl message in a single Write.
func WriteMessage(w io.Writer, msg []byte) error {
	_, err := w.Write(encodeMessage(msg))
	return err
}

// ReadMessage reads one ctl message of at most limit bytes. It returns
// io.EOF if the stream ends before the first frame, and wraps
// mesh.ErrTruncatedFrame if it ends inside the message.
func ReadMessage(r io.Reader, limit int) ([]byte, error) {
	var msg []byte
	for first := true; ; first = false {
		remaining := limit - len(msg)
		// ReadFrame treats a bound of 0 as "default"; with nothing left,
		// allow one byte and refuse it below.
		bound := min(max(remaining, 1), mesh.MaxFrameSize)
		t, payload, err := mesh.ReadFrame(r, bound)
		switch {
		case errors.Is(err, mesh.ErrFrameTooLarge):
			return nil, fmt.Errorf("read ctl message: %w", ErrMessageTooLarge)
		case errors.Is(err, io.EOF) && !first:
			return nil, fmt.Errorf("read ctl message: %w", mesh.ErrTruncatedFrame)
		case err != nil:
			return nil, err
		}
		if len(payload) > remaining {
			return nil, fmt.Errorf("read ctl message: %w", ErrMessageTooLarge)
		}
		switch t {
		case FrameLast:
			if msg == nil {
				return payload, nil
			}
			return append(msg, payload...), nil
		case FrameMore:
			if len(payload) == 0 {
				return nil, fmt.Errorf("read ctl message: empty continuation frame: %w", ErrMalformedMessage)
			}
			msg = append(msg, payload...)
		default:
			return nil, fmt.Errorf("read ctl message: frame type %d: %w", t, ErrMalformedMessage)
		}
	}
}
