package ctl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// FrameType is the first byte of a frame on a workload.ctl stream.
type FrameType byte

// Frame types of a workload.ctl stream. A message (one signed envelope)
// is a run of FrameMore frames, each non-empty, closed by one FrameLast
// frame, so messages larger than MaxFrameBytes cross unchanged.
const (
	FrameMore FrameType = 1
	FrameLast FrameType = 2
)

// frameHeaderBytes is a frame's header: type (1 byte), then the payload
// length (4 bytes, big endian); the layout of the mesh's frames.
const frameHeaderBytes = 5

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
	buf.Grow(len(msg) + (len(msg)/MaxFrameBytes+1)*frameHeaderBytes)
	var hdr [frameHeaderBytes]byte
	for {
		n := min(len(msg), MaxFrameBytes)
		hdr[0] = byte(FrameMore)
		if n == len(msg) {
			hdr[0] = byte(FrameLast)
		}
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		buf.Write(hdr[:])
		buf.Write(msg[:n])
		msg = msg[n:]
		if hdr[0] == byte(FrameLast) {
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
		var hdr [frameHeaderBytes]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if first && errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, ErrTruncatedMessage
			}
			return nil, fmt.Errorf("read ctl frame: %w", err)
		}
		t, n := FrameType(hdr[0]), binary.BigEndian.Uint32(hdr[1:])
		switch {
		case t != FrameMore && t != FrameLast:
			return nil, fmt.Errorf("frame type %d: %w", t, ErrMalformedMessage)
		case t == FrameMore && n == 0:
			return nil, fmt.Errorf("empty continuation frame: %w", ErrMalformedMessage)
		case uint64(n) > MaxFrameBytes || uint64(len(msg))+uint64(n) > uint64(limit):
			return nil, ErrMessageTooLarge
		}
		start := len(msg)
		msg = append(msg, make([]byte, n)...)
		if _, err := io.ReadFull(r, msg[start:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, ErrTruncatedMessage
			}
			return nil, fmt.Errorf("read ctl frame: %w", err)
		}
		if t == FrameLast {
			if msg == nil {
				msg = []byte{}
			}
			return msg, nil
		}
	}
}
