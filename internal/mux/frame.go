package mux

import (
	"encoding/binary"
	"fmt"
)

// Frame types (byte 4 of the header).
const (
	typeData   = 0
	typeWindow = 1
	typeReset  = 2
)

// flagFIN on a DATA frame: the sender sends no more on the stream.
const flagFIN = 1

// RESET codes. They cross the wire as numbers (STYLE 12).
const (
	// codeCancel: the sender closed the stream before it ended cleanly.
	codeCancel = 1
	// codeRefused: the server had MaxStreams open and did not take the
	// stream; nothing of it reached the application.
	codeRefused = 2
)

// header is a frame's 8-byte header.
type header struct {
	id     uint32
	typ    uint8
	flags  uint8
	length uint16
}

// parseHeader reads a header from the first headerLen bytes of b.
func parseHeader(b []byte) header {
	_ = b[headerLen-1]
	return header{
		id:     binary.BigEndian.Uint32(b[0:4]),
		typ:    b[4],
		flags:  b[5],
		length: binary.BigEndian.Uint16(b[6:8]),
	}
}

// appendHeader appends h's encoding to dst.
func appendHeader(dst []byte, h header) []byte {
	dst = binary.BigEndian.AppendUint32(dst, h.id)
	dst = append(dst, h.typ, h.flags)
	return binary.BigEndian.AppendUint16(dst, h.length)
}

// check reports what is wrong with h on its own, whatever the session's
// state: an unknown type or flag, or a length out of bounds. The error
// wraps ErrProtocol.
func (h header) check(maxFrame int) error {
	switch h.typ {
	case typeData:
		if h.flags&^flagFIN != 0 {
			return fmt.Errorf("%w: DATA on stream %d has unknown flags %#x", ErrProtocol, h.id, h.flags)
		}
		if int(h.length) > maxFrame {
			return fmt.Errorf("%w: DATA on stream %d of %d bytes, over the %d-byte frame limit", ErrProtocol, h.id, h.length, maxFrame)
		}
	case typeWindow, typeReset:
		if h.flags != 0 {
			return fmt.Errorf("%w: %s on stream %d has unknown flags %#x", ErrProtocol, typeName(h.typ), h.id, h.flags)
		}
		if h.length != controlLen {
			return fmt.Errorf("%w: %s on stream %d of %d bytes, want %d", ErrProtocol, typeName(h.typ), h.id, h.length, controlLen)
		}
	default:
		return fmt.Errorf("%w: unknown frame type %d on stream %d", ErrProtocol, h.typ, h.id)
	}
	if h.id == 0 {
		return fmt.Errorf("%w: %s on stream 0 (reserved for the session)", ErrProtocol, typeName(h.typ))
	}
	return nil
}

func typeName(t uint8) string {
	switch t {
	case typeData:
		return "DATA"
	case typeWindow:
		return "WINDOW"
	case typeReset:
		return "RESET"
	}
	return fmt.Sprintf("type %d", t)
}
