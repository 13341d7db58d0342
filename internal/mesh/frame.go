package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// StreamKind is the first byte of every mesh stream: it names the
// exchange the stream carries.
type StreamKind byte

// The stream kinds. Values are part of the wire protocol; never reuse one.
const (
	KindAdvert   StreamKind = 1 // advertisements, sender to receiver
	KindInfer    StreamKind = 2 // one forwarded inference request
	KindCtl      StreamKind = 3 // one workload.ctl call
	KindArtifact StreamKind = 4 // package artifact fetch during place
	KindNotice   StreamKind = 5 // one signed revocation notice, sender to receiver
	KindDemand   StreamKind = 6 // one signed demand call, consumer to controller
	KindRaft     StreamKind = 7 // one raft connection between controller voters (internal/raftmesh)
	KindOperator StreamKind = 8 // one operator request a follower forwards to the leader (internal/ctlforward)
)

// String names the kind for metrics labels.
func (k StreamKind) String() string {
	switch k {
	case KindAdvert:
		return "advert"
	case KindInfer:
		return "infer"
	case KindCtl:
		return "ctl"
	case KindArtifact:
		return "artifact"
	case KindNotice:
		return "notice"
	case KindDemand:
		return "demand"
	case KindRaft:
		return "raft"
	case KindOperator:
		return "operator"
	default:
		return "unknown"
	}
}

// FrameType is the first byte of a frame; each stream kind defines its own.
type FrameType byte

// FrameHeaderSize is the size of a frame header: type (1 byte), then the
// payload length (4 bytes, big endian).
const FrameHeaderSize = 5

// MaxFrameSize bounds a frame payload on every stream kind; a stream kind
// may set a lower bound of its own.
const MaxFrameSize = 1 << 20

var (
	// ErrFrameTooLarge is returned by ReadFrame for a declared length
	// above the caller's bound, before anything is allocated.
	ErrFrameTooLarge = errors.New("mesh frame exceeds the size bound")
	// ErrTruncatedFrame is returned when the stream ends inside a frame.
	ErrTruncatedFrame = errors.New("mesh stream ended inside a frame")
)

// WriteFrame writes one frame. Payloads above MaxFrameSize are refused;
// callers split bodies into frames of at most MaxFrameSize.
func WriteFrame(w io.Writer, t FrameType, payload []byte) error {
	if len(payload) > MaxFrameSize {
		return fmt.Errorf("write frame: %d bytes: %w", len(payload), ErrFrameTooLarge)
	}
	var hdr [FrameHeaderSize]byte
	hdr[0] = byte(t)
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	// One write when small keeps a frame in one QUIC STREAM frame.
	if len(payload) <= 4096 {
		buf := make([]byte, 0, FrameHeaderSize+len(payload))
		buf = append(append(buf, hdr[:]...), payload...)
		_, err := w.Write(buf)
		return err
	}
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// AppendFrameHeader appends the header of a frame of type t with a payload
// of n bytes to dst, so that a caller can put several frames, or a header
// and a payload it reads in place, into one Write. n must be within
// 0..MaxFrameSize.
func AppendFrameHeader(dst []byte, t FrameType, n int) []byte {
	var hdr [FrameHeaderSize]byte
	hdr[0] = byte(t)
	binary.BigEndian.PutUint32(hdr[1:], uint32(n))
	return append(dst, hdr[:]...)
}

// ReadFrameHeader reads one frame header and returns its type and payload
// length, which is at most max (clamped to MaxFrameSize): a longer
// declared length is ErrFrameTooLarge. The caller then reads exactly that
// many payload bytes, as it likes (into its own buffer, in pieces). It
// returns io.EOF only at a clean frame boundary and ErrTruncatedFrame
// inside the header.
func ReadFrameHeader(r io.Reader, max int) (FrameType, int, error) {
	var hdr [FrameHeaderSize]byte
	return ReadFrameHeaderInto(r, max, hdr[:])
}

// ReadFrameHeaderInto is ReadFrameHeader reading the header into hdr (at
// least FrameHeaderSize bytes): a caller that reads many frames keeps
// one, where ReadFrameHeader's own escapes to the heap through r, an
// allocation a frame.
func ReadFrameHeaderInto(r io.Reader, max int, hdr []byte) (FrameType, int, error) {
	if max <= 0 || max > MaxFrameSize {
		max = MaxFrameSize
	}
	hdr = hdr[:FrameHeaderSize]
	if _, err := io.ReadFull(r, hdr); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, 0, ErrTruncatedFrame
		}
		return 0, 0, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if uint64(n) > uint64(max) {
		return 0, 0, fmt.Errorf("frame of %d bytes, bound %d: %w", n, max, ErrFrameTooLarge)
	}
	return FrameType(hdr[0]), int(n), nil
}

// ReadFrameInto reads one frame whose payload fits buf into buf and
// returns the payload (a prefix of buf), with ReadFrame's errors; a
// declared length above len(buf) is ErrFrameTooLarge before any payload
// byte is read. It allocates nothing.
func ReadFrameInto(r io.Reader, buf []byte) (FrameType, []byte, error) {
	t, n, err := ReadFrameHeader(r, min(len(buf), MaxFrameSize))
	if err != nil {
		return 0, nil, err
	}
	if len(buf) == 0 && n > 0 {
		return 0, nil, fmt.Errorf("frame of %d bytes, bound 0: %w", n, ErrFrameTooLarge)
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return 0, nil, ErrTruncatedFrame
		}
		return 0, nil, err
	}
	return t, buf[:n], nil
}

// ReadFrame reads one frame whose payload is at most max bytes (max is
// clamped to MaxFrameSize). It returns io.EOF only at a clean frame
// boundary, ErrTruncatedFrame inside a frame, and ErrFrameTooLarge, before
// allocating, when the declared length exceeds max.
func ReadFrame(r io.Reader, max int) (FrameType, []byte, error) {
	var hdr [FrameHeaderSize]byte
	return ReadFrameBuffered(r, max, hdr[:], nil)
}

// ReadFrameBuffered is ReadFrame reading the header into hdr (at least
// FrameHeaderSize bytes) and a payload that fits buf into buf (it is then
// a prefix of buf), a larger one into a new slice: a caller that reads
// many frames keeps both, and allocates for the large ones only. The
// bound and the errors are ReadFrame's.
func ReadFrameBuffered(r io.Reader, max int, hdr, buf []byte) (FrameType, []byte, error) {
	t, n, err := ReadFrameHeaderInto(r, max, hdr)
	if err != nil {
		return 0, nil, err
	}
	var payload []byte
	if buf != nil && n <= len(buf) {
		payload = buf[:n]
	} else {
		payload = make([]byte, n)
	}
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return 0, nil, ErrTruncatedFrame
		}
		return 0, nil, err
	}
	return t, payload, nil
}
