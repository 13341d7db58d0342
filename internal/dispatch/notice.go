package dispatch

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/seqfile"
)

// NoticeSeqFile is the counter of this node's signed revocation notices
// in the data directory: the last sequence number used, in decimal.
const NoticeSeqFile = "notice.seq"

// NoticeSubmitter applies a signed revocation notice on this node and
// sends it to the mesh (*host.Host).
type NoticeSubmitter interface {
	SubmitNotice(ctx context.Context, raw []byte) error
}

// nextNoticeSeqLocked returns a sequence number above every one this
// node used before: the counter file's plus one, or the clock in
// milliseconds if that is higher (so a lost counter file does not make the
// next notices stale on peers). The new value is written and fsynced
// before it is returned. The counter is opened on first use. d.seqMu must
// be held.
func (d *Dispatcher) nextNoticeSeqLocked() (uint64, error) {
	if d.dataDir == "" {
		return 0, errors.New("notice sequence: no data directory")
	}
	if d.noticeSeq == nil {
		c, err := seqfile.Open(filepath.Join(d.dataDir, NoticeSeqFile), 1)
		if err != nil {
			return 0, fmt.Errorf("notice sequence: %w", err)
		}
		d.noticeSeq = c
	}
	next, err := d.noticeSeq.NextAtLeast(uint64(max(d.now().UnixMilli(), 0)))
	if err != nil {
		return 0, fmt.Errorf("notice sequence: %w", err)
	}
	return next, nil
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
