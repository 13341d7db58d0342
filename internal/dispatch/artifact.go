package dispatch

import (
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

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/pkg"
)

// refuse builds a refusal, its message cut to ctl.MaxArtifactMessageBytes.
func refuse(code, format string, args ...any) *ctl.ArtifactRefusal {
	msg := fmt.Sprintf(format, args...)
	if len(msg) > ctl.MaxArtifactMessageBytes {
		msg = strings.ToValidUTF8(msg[:ctl.MaxArtifactMessageBytes], "")
	}
	return &ctl.ArtifactRefusal{Code: code, Message: msg}
}

// deadliner is implemented by streams with I/O deadlines (mesh streams,
// net.Conn).
type deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// serveArtifact is the mesh handler of KindArtifact.
func (d *Dispatcher) serveArtifact(ctx context.Context, peer mesh.PeerInfo, s *mesh.Stream) {
	err := d.ServeArtifact(ctx, peer.ID, s)
	if err != nil {
		s.Reset(mesh.StreamCodeCancelled)
		return
	}
	_ = s.Close()
}

// ServeArtifact serves one fetch on rw, a stream positioned after the
// kind byte, from peerID (the stream's authenticated node id). It is the
// mesh handler's body, exported so a host on this same node can fetch
// through an in-memory stream. A refusal is an answer, not an error; the
// error reports a stream that failed or found no slot in time (the caller
// resets it, and the fetcher resumes).
//
// The request is read (within ArtifactRequestTimeout) and authorised
// before a slot is taken: a peer's slot (MaxArtifactStreamsPerPeer), then
// one of the MaxConcurrentArtifactStreams, waiting at most
// ArtifactSlotWait. So streams that send nothing, or ask for what they
// are not offered, hold no slot, and one peer's fetches leave slots for
// the others.
func (d *Dispatcher) ServeArtifact(ctx context.Context, peerID string, rw io.ReadWriter) error {
	dl, _ := rw.(deadliner)
	if dl != nil {
		_ = dl.SetReadDeadline(time.Now().Add(ArtifactRequestTimeout))
	}
	typ, payload, err := mesh.ReadFrame(rw, ctl.MaxArtifactControlBytes)
	if err != nil {
		d.met.artifactStreams.WithLabelValues("malformed").Inc()
		if errors.Is(err, mesh.ErrFrameTooLarge) {
			return d.writeRefusal(rw, dl, refuse(ctl.ArtifactBadRequest, "fetch request too large"))
		}
		return fmt.Errorf("read fetch request: %w", err)
	}
	if dl != nil {
		_ = dl.SetReadDeadline(time.Time{})
	}
	if typ != ctl.FrameFetch {
		d.met.artifactStreams.WithLabelValues(ctl.ArtifactBadRequest).Inc()
		return d.writeRefusal(rw, dl, refuse(ctl.ArtifactBadRequest, "frame type %d, want a fetch", typ))
	}
	req, err := ctl.DecodeFetchRequest(payload)
	if err != nil {
		d.met.artifactStreams.WithLabelValues(ctl.ArtifactBadRequest).Inc()
		return d.writeRefusal(rw, dl, refuse(ctl.ArtifactBadRequest, "%v", err))
	}
	var sent int64
	of, f, err := d.authorize(peerID, req)
	if err == nil {
		release, serr := d.takeSlots(ctx, peerID)
		if serr != nil {
			result := "cancelled"
			if errors.Is(serr, errArtifactBusy) {
				result = "busy"
			}
			d.met.artifactStreams.WithLabelValues(result).Inc()
			d.log.Debug("artifact fetch found no slot", zap.String("peer", peerID), zap.String("decision_id", req.DecisionID),
				zap.String("path", req.Path), zap.Error(serr))
			return serr
		}
		defer release()
		sent, err = d.serveFile(ctx, of, f, req, rw, dl)
	}
	d.met.artifactBytes.Add(float64(sent))
	if r, ok := errors.AsType[*ctl.ArtifactRefusal](err); ok {
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

func (d *Dispatcher) writeRefusal(w io.Writer, dl deadliner, r *ctl.ArtifactRefusal) error {
	b, _ := json.Marshal(r)
	if err := writeFrame(w, dl, ctl.FrameRefusal, b); err != nil {
		return fmt.Errorf("write artifact refusal: %w", err)
	}
	return nil
}

// errArtifactBusy: no artifact slot came free within ArtifactSlotWait.
var errArtifactBusy = errors.New("no artifact slot free")

// authorize checks a request against the offers, without I/O: the
// decision is offered to peerID, the path is listed, the offset is
// within the file. A refusal is a *ctl.ArtifactRefusal.
func (d *Dispatcher) authorize(peerID string, req ctl.FetchRequest) (*offer, pkg.File, error) {
	// Offers are keyed by decision and target: a peer other than the
	// decision's target learns nothing more than it would of an unknown
	// decision.
	of, ok := d.offers.lookup(req.DecisionID, peerID)
	if !ok {
		return nil, pkg.File{}, refuse(ctl.ArtifactNotOffered, "decision is not offered to this node")
	}
	f, ok := of.files[req.Path]
	if !ok {
		return nil, pkg.File{}, refuse(ctl.ArtifactNotListed, "path is not listed in the decision's manifest")
	}
	if req.Offset > f.Size {
		return nil, pkg.File{}, refuse(ctl.ArtifactBadRequest, "offset %d beyond the size %d", req.Offset, f.Size)
	}
	return of, f, nil
}

// takeSlots takes one of peerID's slots, then a global one, waiting at
// most ArtifactSlotWait for both. It returns errArtifactBusy when that
// wait ends, ctx's error when ctx does.
func (d *Dispatcher) takeSlots(ctx context.Context, peerID string) (release func(), err error) {
	wctx, cancel := context.WithTimeout(ctx, ArtifactSlotWait)
	defer cancel()
	fail := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errArtifactBusy
	}
	releasePeer, ok := d.peerSlots.take(wctx, peerID)
	if !ok {
		return nil, fail()
	}
	select {
	case d.slots <- struct{}{}:
	case <-wctx.Done():
		releasePeer()
		return nil, fail()
	}
	return func() {
		<-d.slots
		releasePeer()
	}, nil
}

// serveFile streams an authorised file. A refusal is returned as
// *ctl.ArtifactRefusal before anything is written, or, for a file that
// changed under us, after the header.
func (d *Dispatcher) serveFile(ctx context.Context, of *offer, f pkg.File, req ctl.FetchRequest, w io.Writer, dl deadliner) (int64, error) {
	file, err := openListed(of.dir, f.Path)
	if err != nil {
		return 0, refuse(ctl.ArtifactIO, "open %s: %v", f.Path, err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
		return 0, refuse(ctl.ArtifactIO, "%s is not the listed file of %d bytes", f.Path, f.Size)
	}
	if _, err := file.Seek(req.Offset, io.SeekStart); err != nil {
		return 0, refuse(ctl.ArtifactIO, "seek %s: %v", f.Path, err)
	}
	hdr, _ := json.Marshal(ctl.FetchHeader{Size: f.Size, Offset: req.Offset})
	if err := writeFrame(w, dl, ctl.FrameHeader, hdr); err != nil {
		return 0, fmt.Errorf("write artifact header: %w", err)
	}
	buf := make([]byte, sha256.Size+ctl.MaxPieceBytes)
	var sent int64
	for remaining := f.Size - req.Offset; remaining > 0; {
		if err := ctx.Err(); err != nil {
			return sent, err
		}
		n := min(remaining, ctl.MaxPieceBytes)
		piece := buf[sha256.Size : sha256.Size+n]
		if _, err := io.ReadFull(file, piece); err != nil {
			return sent, refuse(ctl.ArtifactIO, "read %s: %v", f.Path, err)
		}
		sum := sha256.Sum256(piece)
		copy(buf, sum[:])
		if err := writeFrame(w, dl, ctl.FramePiece, buf[:sha256.Size+n]); err != nil {
			return sent, fmt.Errorf("write artifact piece: %w", err)
		}
		sent += n
		remaining -= n
	}
	if err := writeFrame(w, dl, ctl.FrameEnd, nil); err != nil {
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
