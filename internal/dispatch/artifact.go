package dispatch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
)

// ArtifactVersion is the only fetch request version served.
const ArtifactVersion = 1

// Frame types of an artifact stream (mesh.KindArtifact). Wire values.
const (
	// FrameFetch: host to caller, JSON FetchRequest.
	FrameFetch mesh.FrameType = 1
	// FrameHeader: caller to host, JSON FetchHeader.
	FrameHeader mesh.FrameType = 2
	// FrameData: caller to host, 32 bytes SHA-256 of the piece, then the
	// piece (at most PieceSize bytes).
	FrameData mesh.FrameType = 3
	// FrameEnd: caller to host, empty: the file is complete.
	FrameEnd mesh.FrameType = 4
	// FrameRefusal: caller to host, JSON ArtifactRefusal; ends the stream.
	FrameRefusal mesh.FrameType = 5
)

// Artifact refusal codes. Wire values.
const (
	ArtifactNotOffered = "not_offered"
	ArtifactNotListed  = "not_listed"
	ArtifactBadRequest = "bad_request"
	ArtifactIO         = "io"
)

// FetchRequest asks for one listed file of an offered package, from
// Offset on.
type FetchRequest struct {
	V          int    `json:"v"`
	DecisionID string `json:"decision_id"`
	Path       string `json:"path"`
	Offset     int64  `json:"offset"`
}

// FetchHeader answers a fetch: the file's total size and the offset the
// data frames start at.
type FetchHeader struct {
	Size   int64 `json:"size"`
	Offset int64 `json:"offset"`
}

// ArtifactRefusal ends a fetch that is not served.
type ArtifactRefusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error renders the refusal.
func (r *ArtifactRefusal) Error() string {
	return fmt.Sprintf("artifact fetch refused: %s: %s", r.Code, r.Message)
}

func refuse(code, format string, args ...any) *ArtifactRefusal {
	msg := fmt.Sprintf(format, args...)
	if len(msg) > MaxArtifactRefusalBytes {
		msg = strings.ToValidUTF8(msg[:MaxArtifactRefusalBytes], "")
	}
	return &ArtifactRefusal{Code: code, Message: msg}
}

// DecodeFetchRequest strictly decodes and checks a fetch frame's payload:
// at most MaxFetchRequestBytes, no unknown fields or trailing data,
// version ArtifactVersion, a decision id, a path, an offset not negative.
// Its errors are *ArtifactRefusal with ArtifactBadRequest.
func DecodeFetchRequest(p []byte) (FetchRequest, error) {
	if len(p) > MaxFetchRequestBytes {
		return FetchRequest{}, refuse(ArtifactBadRequest, "fetch request of %d bytes, bound %d", len(p), MaxFetchRequestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	var req FetchRequest
	if err := dec.Decode(&req); err != nil {
		return FetchRequest{}, refuse(ArtifactBadRequest, "decode fetch request: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return FetchRequest{}, refuse(ArtifactBadRequest, "trailing data after the fetch request")
	}
	switch {
	case req.V != ArtifactVersion:
		return FetchRequest{}, refuse(ArtifactBadRequest, "fetch version %d, want %d", req.V, ArtifactVersion)
	case !ctl.ValidDecisionID(req.DecisionID):
		return FetchRequest{}, refuse(ArtifactBadRequest, "malformed decision id")
	case req.Path == "":
		return FetchRequest{}, refuse(ArtifactBadRequest, "no path")
	case req.Offset < 0:
		return FetchRequest{}, refuse(ArtifactBadRequest, "negative offset")
	}
	return req, nil
}

// deadliner is implemented by streams with I/O deadlines (quic streams,
// net.Conn).
type deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// serveArtifact is the mesh handler of KindArtifact.
func (d *Dispatcher) serveArtifact(ctx context.Context, peer mesh.PeerInfo, s *quic.Stream) {
	err := d.ServeArtifact(ctx, peer.ID, s)
	if err != nil {
		s.CancelRead(mesh.StreamCodeCancelled)
		s.CancelWrite(mesh.StreamCodeCancelled)
		return
	}
	s.CancelRead(mesh.StreamCodeCancelled)
	_ = s.Close()
}

// ServeArtifact serves one fetch on rw, a stream positioned after the
// kind byte, from peerID (the stream's authenticated node id). It is the
// mesh handler's body, exported so a host on this same node can fetch
// through an in-memory stream. A refusal is an answer, not an error; the
// error reports a stream that failed (the caller resets it).
func (d *Dispatcher) ServeArtifact(ctx context.Context, peerID string, rw io.ReadWriter) error {
	select {
	case d.slots <- struct{}{}:
	case <-ctx.Done():
		d.met.artifactStreams.WithLabelValues("cancelled").Inc()
		return ctx.Err()
	}
	defer func() { <-d.slots }()

	dl, _ := rw.(deadliner)
	if dl != nil {
		_ = dl.SetReadDeadline(time.Now().Add(ArtifactRequestTimeout))
	}
	typ, payload, err := mesh.ReadFrame(rw, MaxFetchRequestBytes)
	if err != nil {
		d.met.artifactStreams.WithLabelValues("malformed").Inc()
		if errors.Is(err, mesh.ErrFrameTooLarge) {
			return d.writeRefusal(rw, dl, refuse(ArtifactBadRequest, "fetch request too large"))
		}
		return fmt.Errorf("read fetch request: %w", err)
	}
	if dl != nil {
		_ = dl.SetReadDeadline(time.Time{})
	}
	if typ != FrameFetch {
		d.met.artifactStreams.WithLabelValues(ArtifactBadRequest).Inc()
		return d.writeRefusal(rw, dl, refuse(ArtifactBadRequest, "frame type %d, want a fetch", typ))
	}
	req, err := DecodeFetchRequest(payload)
	if err != nil {
		d.met.artifactStreams.WithLabelValues(ArtifactBadRequest).Inc()
		return d.writeRefusal(rw, dl, err.(*ArtifactRefusal))
	}
	sent, err := d.serveFile(ctx, peerID, req, rw, dl)
	d.met.artifactBytes.Add(float64(sent))
	if r, ok := errors.AsType[*ArtifactRefusal](err); ok {
		d.met.artifactStreams.WithLabelValues(r.Code).Inc()
		d.log.Info("artifact fetch refused", zap.String("peer", peerID), zap.String("decision_id", req.DecisionID),
			zap.String("path", req.Path), zap.String("code", r.Code))
		return d.writeRefusal(rw, dl, r)
	}
	if err != nil {
		d.met.artifactStreams.WithLabelValues("error").Inc()
		d.log.Debug("artifact stream failed", zap.String("peer", peerID), zap.String("path", req.Path), zap.Error(err))
		return err
	}
	d.met.artifactStreams.WithLabelValues("served").Inc()
	d.log.Debug("artifact served", zap.String("peer", peerID), zap.String("decision_id", req.DecisionID),
		zap.String("path", req.Path), zap.Int64("offset", req.Offset), zap.Int64("bytes", sent))
	return nil
}

// writeFrame writes one frame under ArtifactWriteTimeout.
func writeFrame(w io.Writer, dl deadliner, t mesh.FrameType, payload []byte) error {
	if dl != nil {
		_ = dl.SetWriteDeadline(time.Now().Add(ArtifactWriteTimeout))
	}
	return mesh.WriteFrame(w, t, payload)
}

func (d *Dispatcher) writeRefusal(w io.Writer, dl deadliner, r *ArtifactRefusal) error {
	b, _ := json.Marshal(r)
	if err := writeFrame(w, dl, FrameRefusal, b); err != nil {
		return fmt.Errorf("write artifact refusal: %w", err)
	}
	return nil
}

// serveFile checks the request against the offers and streams the file.
// A refusal is returned as *ArtifactRefusal before anything is written,
// or, for a file that changed under us, after the header.
func (d *Dispatcher) serveFile(ctx context.Context, peerID string, req FetchRequest, w io.Writer, dl deadliner) (int64, error) {
	of, ok := d.offers.lookup(req.DecisionID)
	// A peer other than the decision's target learns nothing more than
	// it would of an unknown decision.
	if !ok || of.target != peerID {
		return 0, refuse(ArtifactNotOffered, "decision is not offered to this node")
	}
	f, ok := of.files[req.Path]
	if !ok {
		return 0, refuse(ArtifactNotListed, "path is not listed in the decision's manifest")
	}
	if req.Offset > f.Size {
		return 0, refuse(ArtifactBadRequest, "offset %d beyond the size %d", req.Offset, f.Size)
	}
	file, err := openListed(of.dir, f.Path)
	if err != nil {
		return 0, refuse(ArtifactIO, "open %s: %v", f.Path, err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
		return 0, refuse(ArtifactIO, "%s is not the listed file of %d bytes", f.Path, f.Size)
	}
	if _, err := file.Seek(req.Offset, io.SeekStart); err != nil {
		return 0, refuse(ArtifactIO, "seek %s: %v", f.Path, err)
	}
	hdr, _ := json.Marshal(FetchHeader{Size: f.Size, Offset: req.Offset})
	if err := writeFrame(w, dl, FrameHeader, hdr); err != nil {
		return 0, fmt.Errorf("write artifact header: %w", err)
	}
	buf := make([]byte, sha256.Size+PieceSize)
	var sent int64
	for remaining := f.Size - req.Offset; remaining > 0; {
		if err := ctx.Err(); err != nil {
			return sent, err
		}
		n := min(remaining, PieceSize)
		piece := buf[sha256.Size : sha256.Size+n]
		if _, err := io.ReadFull(file, piece); err != nil {
			return sent, refuse(ArtifactIO, "read %s: %v", f.Path, err)
		}
		sum := sha256.Sum256(piece)
		copy(buf, sum[:])
		if err := writeFrame(w, dl, FrameData, buf[:sha256.Size+n]); err != nil {
			return sent, fmt.Errorf("write artifact piece: %w", err)
		}
		sent += n
		remaining -= n
	}
	if err := writeFrame(w, dl, FrameEnd, nil); err != nil {
		return sent, fmt.Errorf("write artifact end: %w", err)
	}
	return sent, nil
}

// openListed opens a listed path inside dir through an os.Root, refusing
// any symbolic link on the way (as pkg.VerifyDir does), so nothing outside
// the package directory, and nothing a link points to, is ever served.
func openListed(dir, p string) (*os.File, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for i := 0; ; {
		j := strings.IndexByte(p[i:], '/')
		prefix := p
		if j >= 0 {
			prefix = p[:i+j]
		}
		st, err := root.Lstat(prefix)
		if err != nil {
			return nil, err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symbolic link", prefix)
		}
		if j < 0 {
			break
		}
		i += j + 1
	}
	return root.Open(p)
}
