package host

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/pkg"
)

// ArtifactOpener opens a fresh artifact stream to the holder of a
// package (the caller of the place), positioned after the stream-kind
// byte. Each file, and each resume of a file, gets its own stream.
type ArtifactOpener func(ctx context.Context) (io.ReadWriteCloser, error)

// fetchError is a failed fetch with the ctl refusal code it maps to:
// CodeFetch for transport failures and refusals by the holder,
// CodeVerify for content that is not what the signed manifest lists.
type fetchError struct {
	code ctl.Code
	err  error
	// permanent errors end the fetch at once; others are resumed.
	permanent bool
}

func (e *fetchError) Error() string { return e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

func transient(format string, args ...any) error {
	return &fetchError{code: ctl.CodeFetch, err: fmt.Errorf(format, args...)}
}

func permanent(code ctl.Code, format string, args ...any) error {
	return &fetchError{code: code, err: fmt.Errorf(format, args...), permanent: true}
}

// fileFetch is the state of one file's fetch across resumes: the bytes
// verified and appended so far, and the running hash of them.
type fileFetch struct {
	decision string
	f        pkg.File
	w        io.Writer
	off      int64
	sum      hash.Hash
	// onBytes counts verified bytes (metrics); may be nil.
	onBytes func(n int)
	// buf is reused for every frame of the file.
	buf []byte
}

// readBufferBytes is the read buffer of an artifact stream.
const readBufferBytes = 256 << 10

// readFrameInto reads one frame in the mesh frame format (as
// mesh.ReadFrame) into buf, which must hold limit bytes, so a fetch
// allocates no buffer per piece. The payload aliases buf.
func readFrameInto(r io.Reader, buf []byte, limit int) (mesh.FrameType, []byte, error) {
	var hdr [mesh.FrameHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, mesh.ErrTruncatedFrame
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if uint64(n) > uint64(limit) || int(n) > len(buf) {
		return 0, nil, fmt.Errorf("frame of %d bytes, bound %d: %w", n, limit, mesh.ErrFrameTooLarge)
	}
	p := buf[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return 0, nil, mesh.ErrTruncatedFrame
		}
		return 0, nil, err
	}
	return mesh.FrameType(hdr[0]), p, nil
}

// fetchFile fetches f from the holder behind open into root, checking
// every piece's SHA-256 before it is appended, resuming a dropped stream
// from the bytes verified so far (at most FetchRetries times, backing off
// from FetchBackoff), then checking the size and whole-file SHA-256 that
// the signed manifest lists. It returns the number of resumes.
func fetchFile(ctx context.Context, open ArtifactOpener, decision string, root *os.Root, f pkg.File, onBytes func(int)) (int, error) {
	if dir := path.Dir(f.Path); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return 0, permanent(ctl.CodeFetch, "create directory of %q: %w", f.Path, err)
		}
	}
	file, err := root.OpenFile(f.Path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, permanent(ctl.CodeFetch, "create %q: %w", f.Path, err)
	}
	defer file.Close()
	st := &fileFetch{decision: decision, f: f, w: file, sum: sha256.New(), onBytes: onBytes}
	resumes := 0
	backoff := FetchBackoff
	for {
		err := st.once(ctx, open)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return resumes, permanent(ctl.CodeFetch, "fetch %q: %w", f.Path, ctx.Err())
		}
		var fe *fetchError
		if errors.As(err, &fe) && fe.permanent {
			return resumes, err
		}
		if resumes >= FetchRetries {
			return resumes, permanent(ctl.CodeFetch, "fetch %q: gave up after %d resumes: %w", f.Path, resumes, err)
		}
		resumes++
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return resumes, permanent(ctl.CodeFetch, "fetch %q: %w", f.Path, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, FetchBackoffMax)
	}
	if st.off != f.Size {
		return resumes, permanent(ctl.CodeVerify, "%q: got %d bytes, manifest lists %d", f.Path, st.off, f.Size)
	}
	if got := hex.EncodeToString(st.sum.Sum(nil)); got != f.SHA256 {
		return resumes, permanent(ctl.CodeVerify, "%q: SHA-256 is not the one the manifest lists", f.Path)
	}
	if err := file.Sync(); err != nil {
		return resumes, permanent(ctl.CodeFetch, "sync %q: %w", f.Path, err)
	}
	if f.Exec {
		if err := root.Chmod(f.Path, 0o755); err != nil {
			return resumes, permanent(ctl.CodeFetch, "chmod %q: %w", f.Path, err)
		}
	}
	return resumes, nil
}

// deadliner is implemented by streams that take read deadlines (QUIC).
type deadliner interface{ SetReadDeadline(time.Time) error }

// once runs one artifact stream for the file from st.off.
func (st *fileFetch) once(ctx context.Context, open ArtifactOpener) error {
	s, err := open(ctx)
	if err != nil {
		return transient("open artifact stream: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer func() {
		stop()
		_ = s.Close()
	}()
	dl, _ := s.(deadliner)
	br := bufio.NewReaderSize(s, readBufferBytes)
	if st.buf == nil {
		st.buf = make([]byte, ctl.PieceHashBytes+ctl.MaxPieceBytes)
	}
	read := func(limit int) (mesh.FrameType, []byte, error) {
		if dl != nil {
			_ = dl.SetReadDeadline(time.Now().Add(ArtifactIdleTimeout))
		}
		return readFrameInto(br, st.buf, limit)
	}
	req := ctl.FetchRequest{V: ctl.ArtifactVersion, DecisionID: st.decision, Path: st.f.Path, Offset: st.off}
	if err := mesh.WriteFrame(s, ctl.FrameFetch, encodeJSON(req)); err != nil {
		return transient("send fetch of %q: %w", st.f.Path, err)
	}
	typ, p, err := read(ctl.MaxArtifactControlBytes)
	if err != nil {
		return transient("read header of %q: %w", st.f.Path, err)
	}
	switch typ {
	case ctl.FrameHeader:
	case ctl.FrameRefusal:
		return refusalError(st.f.Path, p)
	default:
		return permanent(ctl.CodeFetch, "%q: frame type %d where a header belongs", st.f.Path, typ)
	}
	hdr, err := ctl.DecodeFetchHeader(p)
	if err != nil {
		return permanent(ctl.CodeFetch, "%q: %w", st.f.Path, err)
	}
	if hdr.Size != st.f.Size {
		return permanent(ctl.CodeVerify, "%q: holder offers %d bytes, manifest lists %d", st.f.Path, hdr.Size, st.f.Size)
	}
	if hdr.Offset != st.off {
		return permanent(ctl.CodeFetch, "%q: holder answered offset %d for %d", st.f.Path, hdr.Offset, st.off)
	}
	for {
		typ, p, err := read(ctl.PieceHashBytes + ctl.MaxPieceBytes)
		if err != nil {
			return transient("read %q at %d: %w", st.f.Path, st.off, err)
		}
		switch typ {
		case ctl.FramePiece:
			want, data, err := ctl.SplitPiece(p)
			if err != nil {
				return permanent(ctl.CodeFetch, "%q: %w", st.f.Path, err)
			}
			if st.off+int64(len(data)) > st.f.Size {
				return permanent(ctl.CodeVerify, "%q: holder sends more than the %d bytes listed", st.f.Path, st.f.Size)
			}
			got := sha256.Sum256(data)
			if [32]byte(want) != got {
				// A damaged piece is dropped and asked for again.
				return transient("%q: piece at %d fails its hash", st.f.Path, st.off)
			}
			if _, err := st.w.Write(data); err != nil {
				return permanent(ctl.CodeFetch, "write %q: %w", st.f.Path, err)
			}
			st.sum.Write(data)
			st.off += int64(len(data))
			if st.onBytes != nil {
				st.onBytes(len(data))
			}
		case ctl.FrameEnd:
			if len(p) != 0 {
				return permanent(ctl.CodeFetch, "%q: end frame with a payload", st.f.Path)
			}
			if st.off != st.f.Size {
				return permanent(ctl.CodeVerify, "%q: holder ended at %d of %d bytes", st.f.Path, st.off, st.f.Size)
			}
			return nil
		case ctl.FrameRefusal:
			return refusalError(st.f.Path, p)
		default:
			return permanent(ctl.CodeFetch, "%q: unexpected frame type %d", st.f.Path, typ)
		}
	}
}

// refusalError turns a holder's refusal into a permanent fetch error.
func refusalError(p string, payload []byte) error {
	r, err := ctl.DecodeArtifactRefusal(payload)
	if err != nil {
		return permanent(ctl.CodeFetch, "%q: %w", p, err)
	}
	return &fetchError{code: ctl.CodeFetch, err: fmt.Errorf("%q: %w", p, r), permanent: true}
}

// fetchPackage fetches every file v's manifest lists into dir (made
// fresh), then writes the manifest and signature bytes of the signed
// request beside them. Nothing but listed paths is ever written: the
// paths were validated by pkg and are opened through an os.Root.
func fetchPackage(ctx context.Context, open ArtifactOpener, decision string, v *pkg.Verified, dir string, onBytes func(int)) (resumes int, err error) {
	if err := os.RemoveAll(dir); err != nil {
		return 0, permanent(ctl.CodeFetch, "clear partial directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, permanent(ctl.CodeFetch, "create partial directory: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, permanent(ctl.CodeFetch, "open partial directory: %w", err)
	}
	defer root.Close()
	for _, f := range v.Manifest.Files {
		n, err := fetchFile(ctx, open, decision, root, f, onBytes)
		resumes += n
		if err != nil {
			return resumes, err
		}
	}
	for _, w := range []struct {
		name string
		data []byte
	}{{pkg.ManifestFile, v.ManifestBytes}, {pkg.SignatureFile, v.SigBytes}} {
		if err := root.WriteFile(w.name, w.data, 0o644); err != nil {
			return resumes, permanent(ctl.CodeFetch, "write %s: %w", w.name, err)
		}
	}
	return resumes, nil
}

// encodeJSON marshals an artifact control payload (never fails for the
// ctl artifact types).
func encodeJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal artifact frame: %v", err))
	}
	return b
}
