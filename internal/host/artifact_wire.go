package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
)

// Artifact stream protocol (mesh.KindArtifact), the contract between the
// host (fetcher) and the caller of a place (holder). One file per stream:
//
//	host   -> caller  FrameFetch   {"v":1,"decision_id":"<64 hex>","path":"<listed path>","offset":<int64>}
//	caller -> host    FrameHeader  {"size":<total file size>,"offset":<echo>}
//	caller -> host    FramePiece   32-byte SHA-256 of the piece, then the piece (1..MaxPieceBytes)
//	                  ... more pieces ...
//	caller -> host    FrameEnd     (empty)
//
// or, at any point, caller -> host FrameRefusal {"code":"...","message":"..."}.
// Every frame is mesh.WriteFrame / mesh.ReadFrame.
const (
	FrameFetch   mesh.FrameType = 1
	FrameHeader  mesh.FrameType = 2
	FramePiece   mesh.FrameType = 3
	FrameEnd     mesh.FrameType = 4
	FrameRefusal mesh.FrameType = 5
)

// ArtifactVersion is the only fetch request version.
const ArtifactVersion = 1

// Artifact refusal codes a caller may send.
const (
	ArtifactNotOffered = "not_offered"
	ArtifactNotListed  = "not_listed"
	ArtifactBadRequest = "bad_request"
	ArtifactIO         = "io"
)

// FetchRequest is the payload of FrameFetch.
type FetchRequest struct {
	V          int    `json:"v"`
	DecisionID string `json:"decision_id"`
	Path       string `json:"path"`
	Offset     int64  `json:"offset"`
}

// FetchHeader is the payload of FrameHeader.
type FetchHeader struct {
	Size   int64 `json:"size"`
	Offset int64 `json:"offset"`
}

// ArtifactRefusal is the payload of FrameRefusal. It implements error.
type ArtifactRefusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error renders the refusal.
func (r *ArtifactRefusal) Error() string {
	return fmt.Sprintf("artifact refused: %s: %s", r.Code, r.Message)
}

// ErrArtifactMalformed is wrapped by the artifact decoders' errors.
var ErrArtifactMalformed = errors.New("malformed artifact frame")

// decodeArtifactJSON strictly decodes one control frame payload.
func decodeArtifactJSON(p []byte, v any) error {
	if len(p) > MaxArtifactControlBytes {
		return fmt.Errorf("%w: %d bytes, bound %d", ErrArtifactMalformed, len(p), MaxArtifactControlBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrArtifactMalformed, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data", ErrArtifactMalformed)
	}
	return nil
}

// DecodeFetchRequest decodes and checks a FrameFetch payload: version,
// decision id form, a non-empty path of at most 512 bytes, offset >= 0.
// Whether the path is listed is the holder's business.
func DecodeFetchRequest(p []byte) (FetchRequest, error) {
	var r FetchRequest
	if err := decodeArtifactJSON(p, &r); err != nil {
		return FetchRequest{}, err
	}
	switch {
	case r.V != ArtifactVersion:
		return FetchRequest{}, fmt.Errorf("%w: version %d", ErrArtifactMalformed, r.V)
	case !ctl.ValidDecisionID(r.DecisionID):
		return FetchRequest{}, fmt.Errorf("%w: bad decision id", ErrArtifactMalformed)
	case r.Path == "" || len(r.Path) > maxWirePathBytes || !utf8.ValidString(r.Path):
		return FetchRequest{}, fmt.Errorf("%w: bad path", ErrArtifactMalformed)
	case r.Offset < 0:
		return FetchRequest{}, fmt.Errorf("%w: negative offset", ErrArtifactMalformed)
	}
	return r, nil
}

// maxWirePathBytes bounds a path on the wire (pkg.MaxPathLen).
const maxWirePathBytes = 512

// DecodeFetchHeader decodes a FrameHeader payload.
func DecodeFetchHeader(p []byte) (FetchHeader, error) {
	var h FetchHeader
	if err := decodeArtifactJSON(p, &h); err != nil {
		return FetchHeader{}, err
	}
	if h.Size < 0 || h.Offset < 0 || h.Offset > h.Size {
		return FetchHeader{}, fmt.Errorf("%w: size %d offset %d", ErrArtifactMalformed, h.Size, h.Offset)
	}
	return h, nil
}

// DecodeArtifactRefusal decodes a FrameRefusal payload; an unknown code
// is kept as "io" and the message is cut to MaxArtifactMessageBytes.
func DecodeArtifactRefusal(p []byte) (*ArtifactRefusal, error) {
	var r ArtifactRefusal
	if err := decodeArtifactJSON(p, &r); err != nil {
		return nil, err
	}
	switch r.Code {
	case ArtifactNotOffered, ArtifactNotListed, ArtifactBadRequest, ArtifactIO:
	default:
		r.Code = ArtifactIO
	}
	r.Message = clipUTF8Front(r.Message, MaxArtifactMessageBytes)
	return &r, nil
}

// SplitPiece splits a FramePiece payload into its hash and data, checking
// the data is 1..MaxPieceBytes long. It does not check the hash.
func SplitPiece(p []byte) (sum, data []byte, err error) {
	if len(p) <= pieceHashBytes || len(p) > pieceHashBytes+MaxPieceBytes {
		return nil, nil, fmt.Errorf("%w: piece frame of %d bytes", ErrArtifactMalformed, len(p))
	}
	return p[:pieceHashBytes], p[pieceHashBytes:], nil
}

// encodeJSON marshals a control payload (never fails for these types).
func encodeJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal artifact frame: %v", err))
	}
	return b
}

// clipUTF8Front keeps the first n bytes of s, cut on a UTF-8 boundary.
func clipUTF8Front(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
