package ctl

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/nodeld/nodeld/internal/mesh"
)

// Artifact stream protocol (mesh.KindArtifact), the package fetch of a
// place (reference section 2.11): the contract between the host placing a
// package (fetcher) and the caller of the place holding it (holder). One
// file per stream:
//
//	host   -> caller  FrameFetch   {"v":1,"decision_id":"<64 hex>","path":"<listed path>","offset":<int64>}
//	caller -> host    FrameHeader  {"size":<total file size>,"offset":<echo>}
//	caller -> host    FramePiece   32-byte SHA-256 of the piece, then the piece (1..MaxPieceBytes)
//	                  ... more pieces ...
//	caller -> host    FrameEnd     (empty)
//
// or, at any point, caller -> host FrameRefusal {"code":"...","message":"..."},
// which ends the stream. Every frame is mesh.WriteFrame / mesh.ReadFrame.
// The frame types are wire values of artifact streams only; they share
// nothing with FrameMore and FrameLast of workload.ctl streams.
const (
	FrameFetch   mesh.FrameType = 1
	FrameHeader  mesh.FrameType = 2
	FramePiece   mesh.FrameType = 3
	FrameEnd     mesh.FrameType = 4
	FrameRefusal mesh.FrameType = 5
)

// ArtifactVersion is the only fetch request version.
const ArtifactVersion = 1

// Artifact refusal codes a holder may send. Wire values.
const (
	ArtifactNotOffered = "not_offered"
	ArtifactNotListed  = "not_listed"
	ArtifactBadRequest = "bad_request"
	ArtifactIO         = "io"
)

// FetchRequest is the payload of FrameFetch: one listed file of an
// offered package, from Offset on.
type FetchRequest struct {
	V          int    `json:"v"`
	DecisionID string `json:"decision_id"`
	Path       string `json:"path"`
	Offset     int64  `json:"offset"`
}

// FetchHeader is the payload of FrameHeader: the file's total size and
// the offset the pieces start at.
type FetchHeader struct {
	Size   int64 `json:"size"`
	Offset int64 `json:"offset"`
}

// ArtifactRefusal is the payload of FrameRefusal; it ends a fetch that is
// not served. It implements error.
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

// decodeArtifactJSON strictly decodes one control frame payload: at most
// MaxArtifactControlBytes, one JSON object, no unknown fields, no
// trailing data.
func decodeArtifactJSON(p []byte, v any) error {
	if len(p) > MaxArtifactControlBytes {
		return fmt.Errorf("%w: %d bytes, bound %d", ErrArtifactMalformed, len(p), MaxArtifactControlBytes)
	}
	if err := decodeStrict(p, v); err != nil {
		return fmt.Errorf("%w: %v", ErrArtifactMalformed, err)
	}
	return nil
}

// DecodeFetchRequest decodes and checks a FrameFetch payload: version
// ArtifactVersion, a decision id of DecisionIDHexLen lower hex, a
// non-empty UTF-8 path of at most MaxArtifactPathBytes, offset >= 0.
// Whether the path is listed is the holder's business.
func DecodeFetchRequest(p []byte) (FetchRequest, error) {
	var r FetchRequest
	if err := decodeArtifactJSON(p, &r); err != nil {
		return FetchRequest{}, err
	}
	switch {
	case r.V != ArtifactVersion:
		return FetchRequest{}, fmt.Errorf("%w: fetch version %d, want %d", ErrArtifactMalformed, r.V, ArtifactVersion)
	case !ValidDecisionID(r.DecisionID):
		return FetchRequest{}, fmt.Errorf("%w: bad decision id", ErrArtifactMalformed)
	case r.Path == "" || len(r.Path) > MaxArtifactPathBytes || !utf8.ValidString(r.Path):
		return FetchRequest{}, fmt.Errorf("%w: bad path", ErrArtifactMalformed)
	case r.Offset < 0:
		return FetchRequest{}, fmt.Errorf("%w: negative offset", ErrArtifactMalformed)
	}
	return r, nil
}

// DecodeFetchHeader decodes and checks a FrameHeader payload:
// 0 <= offset <= size.
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
// is kept as ArtifactIO and the message is cut to MaxArtifactMessageBytes
// on a UTF-8 boundary.
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
	r.Message = clip(r.Message, MaxArtifactMessageBytes)
	return &r, nil
}

// SplitPiece splits a FramePiece payload into its hash and data, checking
// the data is 1..MaxPieceBytes long. It does not check the hash.
func SplitPiece(p []byte) (sum, data []byte, err error) {
	if len(p) <= PieceHashBytes || len(p) > PieceHashBytes+MaxPieceBytes {
		return nil, nil, fmt.Errorf("%w: piece frame of %d bytes", ErrArtifactMalformed, len(p))
	}
	return p[:PieceHashBytes], p[PieceHashBytes:], nil
}
