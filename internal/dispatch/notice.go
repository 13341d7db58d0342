package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/pkg"
)

// NoticeSeqFile is the counter of this node's signed revocation notices
// in the data directory: the last sequence number used, in decimal.
const NoticeSeqFile = "notice.seq"

// maxNoticeSeqFileBytes bounds the counter file read.
const maxNoticeSeqFileBytes = 64

// NoticeSubmitter applies a signed revocation notice on this node and
// sends it to the mesh (*host.Host).
type NoticeSubmitter interface {
	SubmitNotice(ctx context.Context, raw []byte) error
}

// nextNoticeSeq returns a sequence number above every one this node used
// before: the counter file's plus one, or the clock in milliseconds if
// that is higher (so a lost counter file does not make the next notices
// stale on peers). The new value is written and fsynced before it is
// returned. d.seqMu must be held.
func (d *Dispatcher) nextNoticeSeqLocked() (uint64, error) {
	if d.dataDir == "" {
		return 0, errors.New("notice sequence: no data directory")
	}
	path := filepath.Join(d.dataDir, NoticeSeqFile)
	var last uint64
	f, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return 0, fmt.Errorf("notice sequence: %w", err)
	default:
		b, rerr := io.ReadAll(io.LimitReader(f, maxNoticeSeqFileBytes))
		f.Close()
		if rerr != nil {
			return 0, fmt.Errorf("notice sequence: read %q: %w", path, rerr)
		}
		if last, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return 0, fmt.Errorf("notice sequence: %q: %w", path, err)
		}
	}
	next := max(last+1, uint64(max(d.now().UnixMilli(), 0)))
	if err := writeFileSync(path, []byte(strconv.FormatUint(next, 10)+"\n")); err != nil {
		return 0, fmt.Errorf("notice sequence: %w", err)
	}
	return next, nil
}

// writeFileSync replaces path through a fsynced temp file and a rename,
// then fsyncs the directory.
func writeFileSync(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		_ = os.Remove(name)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// notifyRevoke signs a notice for sub with this node's key and hands it
// to the host, which applies it here and gossips it to linked peers.
func (d *Dispatcher) notifyRevoke(ctx context.Context, action string, sub pkg.Subject) (uint64, error) {
	d.seqMu.Lock()
	defer d.seqMu.Unlock()
	seq, err := d.nextNoticeSeqLocked()
	if err != nil {
		return 0, err
	}
	raw, err := pkg.SignNotice(d.id.PrivateKey(), pkg.Notice{Seq: seq, IssuedAt: d.now(), Action: action, Subject: sub})
	if err != nil {
		return 0, err
	}
	if err := d.notices.SubmitNotice(ctx, raw); err != nil {
		return 0, err
	}
	return seq, nil
}
